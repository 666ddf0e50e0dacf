// `kvcascade replica`: one replica engine behind its OpenAI-compatible HTTP server.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "api/openai_request.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/server_flags.h"
#include "replica/backend/cpu/tensor_parallel_backend.h"
#include "replica/backend/sim/sim_backend.h"
#include "replica/server/replica_stack.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc::cli {
namespace {

struct ReplicaFlags {
  EngineFlags engine;
  ServerFlags server;
  ReplicaServerConfig replica;
  ApiKeyFlags api_keys;
  ApiKeyFlags admin_api_keys;
  bool check_config = false;
};

int run_replica(ReplicaFlags f, CudaBackendMaker cuda) {
  if (Status s = check_backend_options(f.engine.backend); !s.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", s.message().c_str());
    return 2;
  }
  if (f.check_config) {
    if (Status s = check_backend_model(backend_options(f.engine)); !s.ok()) {
      std::fprintf(stderr, "kvcascade replica: %s\n", s.message().c_str());
      return 2;
    }
    std::printf("kvcascade replica: configuration ok\n");
    return 0;
  }
  Result<std::vector<std::string>> keys = load_api_keys(f.api_keys);
  if (!keys.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", keys.error().message.c_str());
    return 2;
  }
  f.replica.api_keys = std::move(*keys);
  Result<std::vector<std::string>> admin_keys = load_api_keys(f.admin_api_keys);
  if (!admin_keys.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", admin_keys.error().message.c_str());
    return 2;
  }
  f.replica.admin_api_keys = std::move(*admin_keys);
  block_shutdown_signals();
  auto tokenizer = make_tokenizer(f.engine.backend);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", tokenizer.error().message.c_str());
    return 2;
  }
  auto chat_template = make_chat_template(**tokenizer);
  if (!chat_template.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", chat_template.error().message.c_str());
    return 2;
  }
  f.replica.chat_template = *chat_template;
  auto backend = make_backend(backend_options(f.engine), **tokenizer, cuda);
  if (!backend.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", backend.error().message.c_str());
    return 2;
  }
  if (std::string note = generation_config_note((*backend)->config()); !note.empty()) {
    std::fprintf(stderr, "kvcascade replica: note: %s\n", note.c_str());
  }
  ReplicaStackConfig rc;
  rc.engine = engine_config(f.engine, **backend);
  rc.server = f.replica;
  rc.limits = f.server.limits;
  rc.http_threads = f.server.threads;
  const std::string backend_name = (*backend)->name();
  const int32_t num_blocks = (*backend)->num_blocks(), block_size = (*backend)->block_size();
  const std::string tokenizer_name = (*tokenizer)->name();
  ReplicaStack stack(std::move(*backend), std::shared_ptr<const Tokenizer>(std::move(*tokenizer)),
                     std::move(rc));
  if (const std::vector<int32_t> ignored = stack.engine().model_eos_not_applied();
      !ignored.empty()) {
    std::string ids;
    for (int32_t id : ignored)
      ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    std::fprintf(stderr,
                 "kvcascade replica: note: the model's eos_token_id (%s) names ids of its own "
                 "tokenizer, not of the byte tokenizer: not applied (sequences end on the byte "
                 "tokenizer's EOS; /v1/info lists it under not_applied)\n",
                 ids.c_str());
  }
  const ReplicaServer& server = stack.server();
  auto port = stack.listen(f.server.host, f.server.port);
  if (!port.ok()) {
    std::fprintf(stderr, "kvcascade replica: %s\n", port.error().message.c_str());
    return 2;
  }
  std::printf(
      "kvcascade replica %s serving model '%s' on http://%s:%u (%s backend, %s attention, %d "
      "KV blocks of %d tokens, tokenizer %s, %s chat template)\n",
      f.replica.replica_id.c_str(), server.config().served_model_name.c_str(),
      f.server.host.c_str(), *port, backend_name.c_str(), f.engine.attention.c_str(), num_blocks,
      block_size, tokenizer_name.c_str(),
      f.replica.chat_template ? "the model's" : "the canonical");
  if (const auto* sim = dynamic_cast<const SimBackend*>(&stack.backend())) {
    const Hardware& hw = sim->preset().hardware;
    std::printf(
        "kvcascade replica: simulated %s: %.0f GB/s, GEMMs %.0f TFLOP/s, %.2f ms per step + %.1f "
        "us per decode row; no math, each step sleeps its predicted time\n",
        sim->preset().name.c_str(), hw.bandwidth_bytes_per_s / 1e9, hw.peak_flops / 1e12,
        hw.step_overhead_s * 1e3, hw.decode_row_overhead_s * 1e6);
  }
  if (const auto* tp = dynamic_cast<const CpuTensorParallelBackend*>(&stack.backend())) {
    const ModelConfig& whole = tp->config();
    const ModelConfig& rank = tp->rank(0).config();
    std::printf(
        "kvcascade replica: tensor parallel over %d ranks (a thread each): per rank %d of %d "
        "query heads, %d of %d KV heads, %d of %d intermediate columns, %d of %d LM-head rows, "
        "%.1f MiB of KV cache\n",
        tp->tensor_parallel_size(), rank.num_attention_heads, whole.num_attention_heads,
        rank.num_key_value_heads, whole.num_key_value_heads, rank.intermediate_size,
        whole.intermediate_size,
        vocab_slice(whole.vocab_size, 0, tp->tensor_parallel_size()).padded, whole.vocab_size,
        static_cast<double>(CpuBackend::kv_cache_bytes(rank, num_blocks, block_size)) / (1 << 20));
  }
  if (!f.replica.api_keys.empty()) {
    std::printf(
        "kvcascade replica: every path but /livez, /readyz and /health needs an API key "
        "(%zu accepted)\n",
        f.replica.api_keys.size());
  } else if (!is_loopback(f.server.host)) {
    std::fprintf(stderr,
                 "kvcascade replica: warning: no --api-key, and %s is not a loopback address: "
                 "completions, KV events and metrics are open to anyone who can connect\n",
                 f.server.host.c_str());
  }
  std::fflush(stdout);
  wait_for_shutdown_signal();
  std::printf("kvcascade replica: shutting down\n");
  stack.stop_http();
  return 0;
}

}  // namespace

Run add_replica_command(CLI::App& app, const CudaEntry& cuda) {
  auto f = std::make_shared<ReplicaFlags>();
  CLI::App* cmd = app.add_subcommand("replica", "serve one engine over an OpenAI-compatible API");
  add_engine_flags(*cmd, f->engine);
  add_server_flags(*cmd, f->server, 8000);
  cmd->add_option("--replica-id", f->replica.replica_id, "this replica's name (router headers)");
  cmd->add_option("--served-model-name", f->replica.served_model_name,
                  "model name clients use (default: the preset or the model folder's name)");
  cmd->add_option("--max-n", f->replica.api.max_n, "largest n accepted")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--stream-interval", f->replica.stream_interval,
                  "a streamed choice's tokens after its first are sent in chunks of up to this "
                  "many (less CPU per token in the replica, router and client; the first token "
                  "and the last are sent at once)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  add_api_key_flags(*cmd, f->api_keys, "api-key",
                    "require Authorization: Bearer KEY on every path but the probes (/livez, "
                    "/readyz, /health)");
  add_api_key_flags(*cmd, f->admin_api_keys, "admin-api-key",
                    "require Authorization: Bearer KEY on /v1/admin/* (weight updates, pause) "
                    "instead of an --api-key");
  cmd->add_option("--weight-version", f->replica.weight_version,
                  "the version of the weights it starts with (responses say which weights "
                  "answered; POST /v1/admin/weights sets the next)")
      ->check([](const std::string& v) {
        return valid_weight_version(v)
                   ? std::string()
                   : std::string("1 to 128 printable ASCII characters, no spaces");
      })
      ->capture_default_str();
  cmd->add_flag("--check-config", f->check_config, "validate the flags and exit");
  return [f, maker = cuda.backend] { return run_replica(*f, maker); };
}

}  // namespace kvc::cli
