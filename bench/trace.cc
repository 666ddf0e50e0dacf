#include "bench/trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>
#include <utility>

namespace kvc::bench {
namespace {

using json = nlohmann::json;

constexpr int32_t kMaxN = 4096;
constexpr int32_t kMaxTokens = 1 << 20;

// Deterministic filler text: words drawn from a generator seeded by `tag`, exactly `bytes` long.
std::string filler(uint64_t tag, int32_t bytes) {
  static const char* kWords[] = {"the",   "model", "cache", "prefix", "token",  "block",  "router",
                                 "query", "value", "batch", "sample", "policy", "tenant", "load"};
  std::mt19937_64 rng(tag * 0x9e3779b97f4a7c15ull + 7);
  std::string out;
  while (static_cast<int32_t>(out.size()) < bytes) {
    out += kWords[rng() % std::size(kWords)];
    out += ' ';
  }
  out.resize(std::max(bytes, 0));
  return out;
}

uint64_t tag(uint64_t kind, uint64_t a, uint64_t b = 0) {
  return (kind << 48) ^ (a << 24) ^ b;
}

// Every tenant's prompt begins with the same 32 bytes, as in the routing evaluation:
// two shared blocks that must not pull every tenant to one replica.
std::string system_prompt(const TraceMix& m, int32_t tenant) {
  std::string s = "You are the assistant of tenant " + std::to_string(tenant) + ". ";
  return s + filler(tag(1, tenant), m.system_prompt_bytes - static_cast<int32_t>(s.size()));
}

class Generator {
 public:
  explicit Generator(const TraceMix& m) : m_(m), rng_(m.seed) {}

  std::vector<TraceRequest> run() {
    const double weights[] = {m_.weight_document, m_.weight_chat, m_.weight_sampling, m_.weight_rl,
                              m_.weight_near_miss};
    std::discrete_distribution<int> kind(std::begin(weights), std::end(weights));
    while (static_cast<int32_t>(out_.size()) < m_.requests) {
      const double t = next_arrival();
      switch (kind(rng_)) {
        case 0:
          document(t);
          break;
        case 1:
          chat(t);
          break;
        case 2:
          sampling(t);
          break;
        case 3:
          rl_step(t);
          break;
        default:
          near_miss(t);
          break;
      }
    }
    out_.resize(m_.requests);
    // An RL step cut by the resize: its group declares only the members that remain (a replica
    // would otherwise hold them for the missing ones until its group wait ran out).
    std::map<std::string, int32_t> members;
    for (const TraceRequest& r : out_)
      if (!r.group.empty()) ++members[r.group];
    for (TraceRequest& r : out_)
      if (!r.group.empty()) r.group_size = std::min(r.group_size, members[r.group]);
    std::stable_sort(out_.begin(), out_.end(),
                     [](const auto& a, const auto& b) { return a.arrival_s < b.arrival_s; });
    return std::move(out_);
  }

 private:
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  // Tenants by popularity: tenant t with weight 1 / (t + 1) (a few large, many small).
  int32_t tenant() {
    std::vector<double> w(m_.tenants);
    for (int32_t t = 0; t < m_.tenants; ++t)
      w[t] = 1.0 / (t + 1);
    return std::discrete_distribution<int32_t>(w.begin(), w.end())(rng_);
  }
  double next_arrival() {
    if (!m_.bursty) {
      now_ += std::exponential_distribution<double>(m_.rate_per_s)(rng_);
      return now_;
    }
    // On for 1 s at 3x the rate, off for 2 s: the same mean rate in bursts.
    now_ += std::exponential_distribution<double>(3 * m_.rate_per_s)(rng_);
    if (std::fmod(now_, 3.0) >= 1.0) now_ = std::floor(now_ / 3.0) * 3.0 + 3.0;
    return now_;
  }
  std::string question() {
    // One number for both (the order of operands of + is unspecified: GCC's was this one).
    const int32_t q = next_q_++;
    return "\n\nQuestion " + std::to_string(q) + ": " + filler(tag(2, q), 48);
  }
  TraceRequest base(double t, int32_t tenant) {
    TraceRequest r;
    r.arrival_s = t;
    r.max_tokens = m_.max_tokens;
    r.tenant = "t" + std::to_string(tenant);
    return r;
  }
  void document(double t) {
    const int32_t tn = tenant();
    const int32_t doc = static_cast<int32_t>(rng_() % m_.documents_per_tenant);
    TraceRequest r = base(t, tn);
    r.prompt = system_prompt(m_, tn) + "\n\nDocument " + std::to_string(doc) + ":\n" +
               filler(tag(3, tn, doc), m_.document_bytes) + question();
    out_.push_back(std::move(r));
  }
  void sampling(double t) {
    const int32_t tn = tenant();
    TraceRequest r = base(t, tn);
    r.prompt = system_prompt(m_, tn) + question();
    r.n = m_.sampling_n;
    out_.push_back(std::move(r));
  }
  void near_miss(double t) {
    const int32_t tn = tenant();
    TraceRequest r = base(t, tn);
    // A timestamp inside the system prompt, 40 bytes in: the prompt diverges after two blocks.
    std::string s = system_prompt(m_, tn);
    const std::string stamp = "[now: " + std::to_string(1700000000 + next_q_) + "] ";
    s.insert(std::min<size_t>(40, s.size()), stamp);
    r.prompt = s + question();
    out_.push_back(std::move(r));
  }
  void chat(double t) {
    // Continue an open session (70%) or open one; a session closes after 6 turns.
    if (sessions_.empty() || uniform() < 0.3) {
      const int32_t tn = tenant();
      sessions_.push_back(
          {next_session_++, tn,
           json::array({{{"role", "system"}, {"content", system_prompt(m_, tn)}}})});
    }
    const size_t i = rng_() % sessions_.size();
    auto& s = sessions_[i];
    s.messages.push_back({{"role", "user"}, {"content", filler(tag(4, s.id, next_q_++), 200)}});
    TraceRequest r = base(t, s.tenant);
    r.messages = s.messages;
    r.session = "s" + std::to_string(s.id);
    out_.push_back(std::move(r));
    // The trace's own assistant turn (a replay cannot know the real reply): later turns extend it.
    s.messages.push_back({{"role", "assistant"}, {"content", filler(tag(5, s.id, next_q_), 120)}});
    if (s.messages.size() >= 13) sessions_.erase(sessions_.begin() + static_cast<long>(i));
  }
  void rl_step(double t) {
    const int32_t step = next_step_++;
    for (int32_t p = 0; p < m_.rl_prompts; ++p) {
      TraceRequest r;
      r.arrival_s = t;
      r.max_tokens = 2 * m_.max_tokens;  // rollouts are longer than chat answers
      r.tenant = "rl";
      r.prompt = "Solve the problem step by step and give the final answer.\n\nProblem " +
                 std::to_string(step) + "." + std::to_string(p) + ": " +
                 filler(tag(6, step, p), 512);
      if (uniform() < m_.rl_as_group) {
        r.group = "rl" + std::to_string(step) + "-p" + std::to_string(p);
        r.group_size = m_.rl_samples;
        for (int32_t s = 0; s < m_.rl_samples; ++s)
          out_.push_back(r);
      } else {
        r.n = m_.rl_samples;
        out_.push_back(std::move(r));
      }
    }
  }

  const TraceMix& m_;
  std::mt19937_64 rng_;
  std::vector<TraceRequest> out_;
  double now_ = 0;
  int32_t next_q_ = 0, next_session_ = 0, next_step_ = 0;
  struct OpenSession {
    int32_t id, tenant;
    json messages;
  };
  std::vector<OpenSession> sessions_;
};

}  // namespace

std::string trace_line(const TraceRequest& r) {
  json j = {{"arrival_s", r.arrival_s}};
  if (r.is_chat()) {
    j["messages"] = r.messages;
  } else {
    j["prompt"] = r.prompt;
  }
  j["n"] = r.n;
  j["max_tokens"] = r.max_tokens;
  if (!r.tenant.empty()) j["tenant"] = r.tenant;
  if (!r.session.empty()) j["session"] = r.session;
  if (!r.group.empty()) j["group"] = r.group;
  if (r.group_size > 0) j["group_size"] = r.group_size;
  return j.dump();
}

Result<TraceRequest> parse_trace_line(const std::string& line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"not valid JSON"};
  if (!j.is_object()) return Error{"not a JSON object"};
  TraceRequest r;
  auto number = [&](const char* key, double lo, double hi, bool integer) -> Result<double> {
    const json& v = j[key];
    if (!v.is_number()) return Error{std::string("\"") + key + "\" must be a number"};
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi) || (integer && x != std::floor(x))) {
      return Error{std::string("\"") + key + "\" must be " + (integer ? "an integer " : "") +
                   "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
    }
    return x;
  };
  if (!j.contains("arrival_s")) return Error{"missing \"arrival_s\""};
  auto arrival = number("arrival_s", 0, 1e9, false);
  if (!arrival.ok()) return arrival.error();
  r.arrival_s = *arrival;
  const bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
  if (has_prompt == has_messages) return Error{"exactly one of \"prompt\" and \"messages\""};
  if (has_prompt) {
    if (!j["prompt"].is_string()) return Error{"\"prompt\" must be a string"};
    r.prompt = j["prompt"].get<std::string>();
  } else {
    if (!j["messages"].is_array() || j["messages"].empty()) {
      return Error{"\"messages\" must be a non-empty array"};
    }
    r.messages = j["messages"];
  }
  for (auto [key, field, hi] :
       {std::tuple{"n", &r.n, kMaxN}, std::tuple{"max_tokens", &r.max_tokens, kMaxTokens},
        std::tuple{"group_size", &r.group_size, kMaxN}}) {
    if (!j.contains(key)) continue;
    auto v = number(key, std::string(key) == "group_size" ? 0 : 1, hi, true);
    if (!v.ok()) return v.error();
    *field = static_cast<int32_t>(*v);
  }
  for (auto [key, field] : {std::pair{"tenant", &r.tenant}, std::pair{"session", &r.session},
                            std::pair{"group", &r.group}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return Error{std::string("\"") + key + "\" must be a string"};
    *field = j[key].get<std::string>();
  }
  return r;
}

Result<std::vector<TraceRequest>> read_trace(std::istream& in, const std::string& source) {
  std::vector<TraceRequest> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<TraceRequest> r = parse_trace_line(line);
    if (!r.ok()) {
      return Error{source + ":" + std::to_string(number) + ": " + r.error().message};
    }
    out.push_back(std::move(r).value());
  }
  if (in.bad()) return Error{source + ": read error"};
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

void write_trace(std::ostream& out, const std::vector<TraceRequest>& trace) {
  for (const TraceRequest& r : trace)
    out << trace_line(r) << '\n';
}

Result<TraceMix> trace_mix(const std::string& name) {
  TraceMix m;
  m.name = name;
  if (name == "chat") {
    // The one Poisson mix, at twice the others' mean rate (theirs peak at 3x in bursts): at
    // 100/s each of 16 H200 replicas sees ~6 requests a second and every cache-aware policy's
    // TTFT is the prefill plus the step in progress on the prompt's one holder
    // (bench/results/routing.md, "Load").
    m.rate_per_s = 200;
    m.weight_document = 1;
    m.weight_chat = 1.5;
  } else if (name == "rl") {
    m.bursty = true;
    m.weight_document = 0.2;
    m.weight_chat = 0.3;
    m.weight_rl = 0.05;  // a step is rl_prompts x (1 or rl_samples) requests
    m.rl_prompts = 4;
    m.rl_samples = 16;
  } else if (name == "mixed") {
    m.bursty = true;
    m.weight_document = 1;
    m.weight_chat = 1;
    m.weight_sampling = 0.3;
    m.weight_rl = 0.03;
    m.weight_near_miss = 0.3;
  } else {
    return Error{"unknown trace mix '" + name + "' (known: chat, rl, mixed)"};
  }
  return m;
}

std::vector<std::string> trace_mix_names() {
  return {"chat", "rl", "mixed"};
}

std::vector<TraceRequest> generate_trace(const TraceMix& mix) {
  return Generator(mix).run();
}

}  // namespace kvc::bench
