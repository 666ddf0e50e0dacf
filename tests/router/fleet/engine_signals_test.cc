// What the router reads from engines, against bodies in their real shapes (the versions are
// those bench/fake_engine.h mimics: vLLM v0.6-v0.10, SGLang v0.4.9-v0.5).
#include "router/fleet/engine_signals.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(EngineSignals, VllmMetricsOfV010) {
  const char* text =
      R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B"} 2.0
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B"} 0.5
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_cpu_blocks="None",num_gpu_blocks="2000"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
)";
  auto load = read_vllm_metrics(text);
  ASSERT_TRUE(load.ok()) << load.error().message;
  EXPECT_EQ(load->running, 5);
  EXPECT_EQ(load->waiting, 7);
  EXPECT_EQ(load->kv_usage, 0.5);  // the fullest engine
  EXPECT_EQ(load->kv_capacity_tokens, 32000);
}

TEST(EngineSignals, VllmMetricsBeforeV010) {
  auto load = read_vllm_metrics(
      "vllm:num_requests_running{model_name=\"m\"} 1.0\n"
      "vllm:num_requests_waiting{model_name=\"m\"} 0.0\n"
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n");
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->running, 1);
  EXPECT_EQ(load->kv_usage, 0.9);
  EXPECT_EQ(load->kv_capacity_tokens, std::nullopt);
}

TEST(EngineSignals, GarbageMetricsAreAnErrorThatSaysWhy) {
  for (const char* text : {"", "<html><body>502 Bad Gateway</body></html>", "\x01\x02\xff",
                           "vllm:num_requests_running{model_name=\"m} 1\n"}) {
    auto load = read_vllm_metrics(text);
    ASSERT_FALSE(load.ok()) << text;
    EXPECT_NE(load.error().message.find("vllm:num_requests_running"), std::string::npos);
  }
  // Absurd values are clamped, not trusted: no overflow, usage stays a share.
  auto load = read_vllm_metrics(
      "vllm:num_requests_running 1e300\nvllm:num_requests_waiting -5\n"
      "vllm:kv_cache_usage_perc 40\nvllm:cache_config_info{block_size=\"x\",num_gpu_blocks=\"9\"} "
      "1\n");
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->running, 1000000000000);
  EXPECT_EQ(load->waiting, 0);
  EXPECT_EQ(load->kv_usage, 1.0);
  EXPECT_EQ(load->kv_capacity_tokens, std::nullopt);
}

TEST(EngineSignals, SglangMetricsAndGetLoad) {
  auto m = read_sglang_metrics(
      "sglang:num_running_reqs{model_name=\"q\"} 4.0\nsglang:num_queue_reqs{model_name=\"q\"} 9.0\n"
      "sglang:token_usage{model_name=\"q\"} 0.3\nsglang:max_total_num_tokens{model_name=\"q\"} "
      "161721.0\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->running, 4);
  EXPECT_EQ(m->waiting, 9);
  EXPECT_EQ(m->kv_usage, 0.3);
  EXPECT_EQ(m->kv_capacity_tokens, 161721);
  // Two DP ranks; num_reqs counts running and waiting.
  auto l = read_sglang_load(R"([{"dp_rank":0,"num_reqs":10,"num_waiting_reqs":4,"num_tokens":900},)"
                            R"({"dp_rank":1,"num_reqs":2,"num_waiting_reqs":0,"num_tokens":10}])");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->running, 8);
  EXPECT_EQ(l->waiting, 4);
  auto legacy = read_sglang_load(R"({"load": 3})");
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->running, 3);
  for (const char* bad : {"", "[]", "[1,2]", R"([{"num_reqs":"many"}])", R"({"x":1})", "null"}) {
    EXPECT_FALSE(read_sglang_load(bad).ok()) << bad;
  }
}

// A replica's id goes into response headers, the decisions file and the route detail: one that
// could break a header (CR LF), a TSV column or the detail's separators is not taken, and why
// is said; the pool then names the replica by its address.
TEST(EngineSignals, KvcascadeInfoRefusesAReplicaIdThatIsNotPrintable) {
  auto info =
      read_kvcascade_info(R"({"replica_id":"pod-7.ns:8000","model":"m","block_size":16})", 16);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->replica_id, "pod-7.ns:8000");
  EXPECT_TRUE(info->replica_id_error.empty());
  const std::string long_id(129, 'r');
  for (const std::string& bad : {std::string(R"(r0\r\nx-evil: 1)"), std::string("r 0"),
                                 std::string("r0;sim1 m=9"), std::string(R"(r\u00e9)"), long_id}) {
    info =
        read_kvcascade_info(R"({"replica_id":")" + bad + R"(","model":"m","block_size":16})", 16);
    ASSERT_TRUE(info.ok()) << bad;
    EXPECT_EQ(info->replica_id, "") << bad;
    EXPECT_NE(info->replica_id_error.find("printable ASCII"), std::string::npos) << bad;
  }
  info = read_kvcascade_info(
      R"({"replica_id":")" + std::string(128, 'r') + R"(","model":"m","block_size":16})", 16);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->replica_id.size(), 128u);
}

TEST(EngineSignals, KvcascadeInfoAndLoadNeverThrowOnWrongTypes) {
  auto info = read_kvcascade_info(R"({"replica_id":"r0","model":"tiny","block_size":16})", 16);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->hash_model, "tiny");
  EXPECT_EQ(info->max_model_len, std::nullopt);
  // Its context where stated and in range (a wrong one is left out, not an error).
  EXPECT_EQ(read_kvcascade_info(R"({"model":"m","block_size":16,"max_model_len":4096})", 16)
                ->max_model_len,
            4096);
  EXPECT_EQ(read_kvcascade_info(R"({"model":"m","block_size":16,"max_model_len":"x"})", 16)
                ->max_model_len,
            std::nullopt);
  EXPECT_EQ(
      read_kvcascade_info(R"({"model":"m","block_size":16,"max_model_len":0})", 16)->max_model_len,
      std::nullopt);
  EXPECT_FALSE(read_kvcascade_info(R"({"model":"tiny"})", 16).ok());  // not kvcascade's
  EXPECT_FALSE(read_kvcascade_info(R"({"model":7,"block_size":16})", 16).ok());
  EXPECT_FALSE(read_kvcascade_info(R"({"model":"m","block_size":0})", 16).ok());
  EXPECT_FALSE(read_kvcascade_info("[1]", 16).ok());
  auto load = read_kvcascade_load(R"({"running_sequences":"x","waiting_sequences":[],"q":{}})");
  ASSERT_TRUE(load.ok());  // wrong types read as zero
  EXPECT_EQ(load->running, 0);
  EXPECT_FALSE(read_kvcascade_load("[]").ok());
  EXPECT_FALSE(read_kvcascade_load("{").ok());
}

// The last work announcement a load's figures hold (work_seq): the tick's over the live one,
// and none without the work figures it goes with.
TEST(EngineSignals, KvcascadeLoadReadsWorkSeqWithTheWorkFigures) {
  auto ticked = read_kvcascade_load(
      R"({"computed_tokens_total":100,"queued_work_tokens":7,"work_seq":12,)"
      R"("tick":{"at_ms":1796432854500,"computed_tokens_total":90,"queued_work_tokens":6,)"
      R"("work_seq":10}})");
  ASSERT_TRUE(ticked.ok());
  EXPECT_EQ(ticked->work_seq, 10);
  auto live = read_kvcascade_load(R"({"computed_tokens_total":100,"queued_work_tokens":7,)"
                                  R"("work_seq":12})");
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->work_seq, 12);
  auto older = read_kvcascade_load(R"({"computed_tokens_total":100,"queued_work_tokens":7})");
  ASSERT_TRUE(older.ok());
  EXPECT_FALSE(older->work_seq.has_value());
  auto unpaired = read_kvcascade_load(R"({"computed_tokens_total":100,"work_seq":12})");
  ASSERT_TRUE(unpaired.ok());
  EXPECT_FALSE(unpaired->work_seq.has_value());
  for (const char* bad :
       {R"({"computed_tokens_total":1,"queued_work_tokens":1,"work_seq":"3"})",
        R"({"computed_tokens_total":1,"queued_work_tokens":1,"work_seq":null})"}) {
    auto l = read_kvcascade_load(bad);
    ASSERT_TRUE(l.ok()) << bad;
    EXPECT_FALSE(l->work_seq.has_value()) << bad;
  }
}

// kvcascade's routing figures: the tick's (alike for every router of the period) over the live
// ones; the work figures only as a pair (an older replica reports neither).
TEST(EngineSignals, KvcascadeLoadPrefersTheTickAndReadsWorkAsAPair) {
  auto load = read_kvcascade_load(
      R"({"running_sequences":9,"waiting_sequences":1,"queued_prefill_tokens":5,)"
      R"("computed_tokens_total":100,"queued_work_tokens":7,"weight_version":"3",)"
      R"("tick":{"at_ms":1796432854500,"running_sequences":4,"waiting_sequences":2,)"
      R"("queued_prefill_tokens":3,"computed_tokens_total":90,"queued_work_tokens":6,)"
      R"("planned_open_completion_tokens":180}})");
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->planned_open_completion_tokens, 180);
  EXPECT_EQ(load->running, 4);
  EXPECT_EQ(load->waiting, 2);
  EXPECT_EQ(load->queued_prefill_tokens, 3);
  EXPECT_EQ(load->computed_tokens_total, 90);
  EXPECT_EQ(load->queued_work_tokens, 6);
  EXPECT_EQ(load->weight_version, "3");
  EXPECT_EQ(load->tick_at_ms, 1796432854500);  // a time stamp: not clamped like a count
  EXPECT_FALSE(load->busy_seconds_total.has_value());
  EXPECT_FALSE(load->steps_total.has_value());
  auto live = read_kvcascade_load(
      R"({"running_sequences":9,"computed_tokens_total":100,"queued_work_tokens":7,)"
      R"("busy_seconds_total":12.5,"steps":40})");
  ASSERT_TRUE(live.ok());
  EXPECT_FALSE(live->planned_open_completion_tokens.has_value());  // an older replica
  EXPECT_EQ(live->running, 9);
  EXPECT_EQ(live->computed_tokens_total, 100);
  EXPECT_DOUBLE_EQ(*live->busy_seconds_total, 12.5);
  EXPECT_EQ(live->steps_total, 40);  // the live count
  auto ticked =
      read_kvcascade_load(R"({"steps":40,"tick":{"at_ms":1796432854500,"computed_tokens_total":90,)"
                          R"("queued_work_tokens":6,"busy_seconds_total":11.0,"steps_total":35}})");
  ASSERT_TRUE(ticked.ok());
  EXPECT_EQ(ticked->steps_total, 35);  // the tick's, with its busy seconds
  for (const char* bad : {R"({"busy_seconds_total":-1})", R"({"busy_seconds_total":"3"})",
                          R"({"busy_seconds_total":null})"}) {
    auto l = read_kvcascade_load(bad);
    ASSERT_TRUE(l.ok()) << bad;
    EXPECT_FALSE(l->busy_seconds_total.has_value()) << bad;
  }
  EXPECT_FALSE(load->step_model.has_value());
  auto modelled = read_kvcascade_load(
      R"({"step_model":{"overhead_s":0.004,"prefill_token_s":2e-5,"decode_seq_s":5e-5,)"
      R"("kv_gb_s":0.22,"steps":300}})");
  ASSERT_TRUE(modelled.ok() && modelled->step_model.has_value());
  EXPECT_DOUBLE_EQ(modelled->step_model->overhead_s, 0.004);
  EXPECT_DOUBLE_EQ(modelled->step_model->kv_gb_s, 0.22);
  EXPECT_EQ(modelled->step_model->steps, 300);
  for (const char* bad :
       {R"({"step_model":{"overhead_s":-1,"prefill_token_s":0,"decode_seq_s":0,"kv_gb_s":0}})",
        R"({"step_model":{"overhead_s":0.1,"prefill_token_s":"x","decode_seq_s":0,"kv_gb_s":0}})",
        R"({"step_model":{"overhead_s":0.1}})", R"({"step_model":[1,2]})"}) {
    auto l = read_kvcascade_load(bad);
    ASSERT_TRUE(l.ok()) << bad;
    EXPECT_FALSE(l->step_model.has_value()) << bad;
  }
  auto half = read_kvcascade_load(R"({"running_sequences":9,"computed_tokens_total":100})");
  ASSERT_TRUE(half.ok());
  EXPECT_FALSE(half->computed_tokens_total.has_value());
  EXPECT_FALSE(half->queued_work_tokens.has_value());
}

TEST(EngineSignals, ModelListAndKindDetection) {
  auto list = read_model_list(
      R"({"object":"list","data":[{"id":"llama","object":"model","owned_by":"vllm","root":"llama"},)"
      R"({"id":"llama-lora","object":"model","owned_by":"vllm","parent":"llama"},{"id":5},"x"]})");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->ids, (std::vector<std::string>{"llama", "llama-lora"}));
  EXPECT_EQ(list->max_model_len, std::nullopt);
  // vLLM states each model's context: the smallest is what a request must fit.
  EXPECT_EQ(read_model_list(R"({"data":[{"id":"a","max_model_len":8192},)"
                            R"({"id":"b","max_model_len":4096},{"id":"c"}]})")
                ->max_model_len,
            4096);
  EXPECT_EQ(kind_from_owner(list->owned_by), ReplicaKind::kVllm);
  EXPECT_EQ(kind_from_owner("sglang"), ReplicaKind::kSglang);
  EXPECT_EQ(kind_from_owner("organization-owner"), ReplicaKind::kOpenai);
  EXPECT_FALSE(read_model_list(R"({"data":[]})").ok());
  EXPECT_FALSE(read_model_list(R"({"data":{}})").ok());
  EXPECT_FALSE(read_model_list("not json").ok());
  EXPECT_EQ(kind_from_metrics("sglang:num_running_reqs 1\n"), ReplicaKind::kSglang);
  EXPECT_EQ(kind_from_metrics("process_cpu_seconds_total 1\n"), ReplicaKind::kOpenai);
  EXPECT_EQ(parse_replica_kind("vllm"), ReplicaKind::kVllm);
  EXPECT_EQ(parse_replica_kind("VLLM"), std::nullopt);
  for (const std::string& name : replica_kind_names())
    EXPECT_EQ(replica_kind_name(*parse_replica_kind(name)), name);
}

}  // namespace
}  // namespace kvc
