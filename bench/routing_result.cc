// What a routing replay is measured against and by: the references (the oracle's unbounded
// cache, the fleet's memory as one LRU cache, the TTFT floor) and RoutingResult's figures.
#include <algorithm>
#include <iterator>
#include <limits>
#include <list>
#include <numeric>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/chat_render.h"
#include "bench/loadgen.h"
#include "bench/routing_bench.h"
#include "prefix_index/block_hash.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;
constexpr size_t kBlock = kRoutingBlock;

double ratio_to_mean(const std::vector<int64_t>& work, double q) {
  if (work.empty()) return 0;
  const double mean = std::accumulate(work.begin(), work.end(), 0.0) / work.size();
  if (mean <= 0) return 0;
  std::vector<double> v(work.begin(), work.end());
  return LoadStats::percentile(v, q) / mean;
}

}  // namespace

std::string prompt_bytes(const TraceRequest& r) {
  if (!r.is_chat()) return r.prompt;
  Result<std::string> s = render_chat(r.messages, true);
  return s.ok() ? *s : std::string{};
}

double RoutingResult::hit_ratio() const {
  return oracle_cached_tokens > 0 ? static_cast<double>(cached_tokens) / oracle_cached_tokens : 1;
}
double RoutingResult::fleet_min_ratio() const {
  return oracle_cached_tokens > 0
             ? static_cast<double>(fleet_min_cached_tokens) / oracle_cached_tokens
             : 1.0;
}

double RoutingResult::hit_ratio_vs_fleet_lru() const {
  return fleet_lru_cached_tokens > 0 ? static_cast<double>(cached_tokens) / fleet_lru_cached_tokens
                                     : 1;
}
double RoutingResult::cross_replica_share() const {
  return oracle_cached_tokens > 0
             ? static_cast<double>(cross_replica_prefill_tokens) / oracle_cached_tokens
             : 0;
}
double RoutingResult::max_over_mean_work() const {
  return ratio_to_mean(replica_work, 1.0);
}
double RoutingResult::p99_over_mean_work() const {
  return ratio_to_mean(replica_work, 0.99);
}
double RoutingResult::goodput() const {
  if (requests == 0) return 0;
  const auto good =
      std::count_if(ttft_ms.begin(), ttft_ms.end(), [&](double t) { return t <= ttft_slo_ms; });
  return static_cast<double>(good) / requests;
}

json RoutingResult::to_json() const {
  auto pct = [](const std::vector<double>& v, double q) { return LoadStats::percentile(v, q); };
  return {{"mix", mix},
          {"policy", policy},
          {"routers", routers},
          {"requests", requests},
          {"errors", errors},
          {"seconds", seconds},
          {"prompt_tokens", prompt_tokens},
          {"cached_tokens", cached_tokens},
          {"oracle_cached_tokens", oracle_cached_tokens},
          {"hit_ratio_vs_oracle", hit_ratio()},
          {"fleet_kv_tokens", fleet_kv_tokens},
          {"fleet_host_kv_tokens", fleet_host_kv_tokens},
          {"fleet_lru_cached_tokens", fleet_lru_cached_tokens},
          {"hit_ratio_vs_fleet_lru", hit_ratio_vs_fleet_lru()},
          {"fleet_min_cached_tokens", fleet_min_cached_tokens},
          {"fleet_min_ratio", fleet_min_ratio()},
          {"cross_replica_prefill_tokens", cross_replica_prefill_tokens},
          {"cross_replica_prefill_vs_oracle", cross_replica_share()},
          {"groups", groups},
          {"split_groups", split_groups},
          {"replica_work_tokens", replica_work},
          {"work_max_over_mean", max_over_mean_work()},
          {"work_p99_over_mean", p99_over_mean_work()},
          {"ttft_ms",
           {{"p50", pct(ttft_ms, 0.5)}, {"p90", pct(ttft_ms, 0.9)}, {"p99", pct(ttft_ms, 0.99)}}},
          {"e2e_ms",
           {{"p50", pct(e2e_ms, 0.5)}, {"p90", pct(e2e_ms, 0.9)}, {"p99", pct(e2e_ms, 0.99)}}},
          {"ttft_slo_ms", ttft_slo_ms},
          {"goodput", goodput()},
          {"busy", busy},
          {"replica_busy", replica_busy},
          {"replica_computed_tokens", replica_computed_tokens},
          {"replica_preemptions", replica_preemptions},
          {"error_reasons", error_reasons}};
}

std::vector<int64_t> oracle_cached_per_request(const std::vector<TraceRequest>& trace) {
  // Nothing is ever evicted: every full block seen before is served.
  return fleet_lru_cached_per_request(trace, std::numeric_limits<int64_t>::max());
}

std::vector<int64_t> fleet_lru_cached_per_request(const std::vector<TraceRequest>& trace,
                                                  int64_t capacity_blocks) {
  const BlockHash seed = chain_seed("oracle");
  std::list<uint64_t> order;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  std::vector<int64_t> cached;
  cached.reserve(trace.size());
  for (const TraceRequest& r : trace) {
    const std::vector<BlockHash> blocks = hash_blocks(seed, prompt_bytes(r), kBlock);
    size_t hit = 0;
    while (hit < blocks.size() && where.count(blocks[hit].value))
      ++hit;
    cached.push_back(static_cast<int64_t>(hit * kBlock));
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      if (auto it = where.find(b->value); it != where.end()) {
        order.splice(order.begin(), order, it->second);
      } else {
        order.push_front(b->value);
        where[b->value] = order.begin();
      }
    }
    while (static_cast<int64_t>(order.size()) > std::max<int64_t>(capacity_blocks, 0)) {
      where.erase(order.back());
      order.pop_back();
    }
  }
  return cached;
}

int64_t fleet_min_cached_tokens(const std::vector<TraceRequest>& trace, int64_t capacity_blocks) {
  const BlockHash seed = chain_seed("oracle");
  std::vector<uint64_t> accesses;  // every prompt's blocks, in arrival order
  for (const TraceRequest& r : trace) {
    for (const BlockHash& b : hash_blocks(seed, prompt_bytes(r), kBlock))
      accesses.push_back(b.value);
  }
  // next_use[i]: where accesses[i]'s block is accessed again (accesses.size(): never).
  const size_t never = accesses.size();
  std::vector<size_t> next_use(accesses.size());
  {
    std::unordered_map<uint64_t, size_t> later;
    for (size_t i = accesses.size(); i-- > 0;) {
      auto [it, fresh] = later.try_emplace(accesses[i], never);
      next_use[i] = it->second;
      it->second = i;
    }
  }
  const auto capacity = static_cast<size_t>(std::max<int64_t>(capacity_blocks, 0));
  // The resident blocks, each keyed by its next access: a block is resident at access i exactly
  // when (i, block) is here.
  std::set<std::pair<size_t, uint64_t>> resident;
  int64_t hits = 0;
  for (size_t i = 0; i < accesses.size(); ++i) {
    const uint64_t block = accesses[i];
    if (resident.erase({i, block}) > 0) {
      ++hits;
    } else if (capacity == 0) {
      continue;
    } else if (resident.size() == capacity) {
      resident.erase(std::prev(resident.end()));  // the block used again the latest
    }
    resident.emplace(next_use[i], block);
  }
  return hits * static_cast<int64_t>(kBlock);
}

int64_t oracle_cached_tokens(const std::vector<TraceRequest>& trace) {
  const std::vector<int64_t> cached = oracle_cached_per_request(trace);
  return std::accumulate(cached.begin(), cached.end(), int64_t{0});
}

std::vector<double> ttft_floor_ms(const std::vector<TraceRequest>& trace, const SimPreset& preset,
                                  int32_t max_tokens_per_step) {
  const std::vector<int64_t> cached = oracle_cached_per_request(trace);
  std::vector<double> ms;
  ms.reserve(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const auto tokens = static_cast<int64_t>(prompt_bytes(trace[i]).size());
    // The engine reuses whole cached blocks short of the last token: a fully cached prompt
    // recomputes its last block.
    const int64_t reusable = std::max<int64_t>(tokens - 1, 0) / int64_t{kBlock} * int64_t{kBlock};
    int64_t start = std::min(cached[i], reusable);
    double s = 0;
    while (start < tokens) {
      const int64_t len = std::min<int64_t>(tokens - start, max_tokens_per_step);
      const StepWork w = prefill_chunk_work(preset.model, start, len, start + len == tokens,
                                            preset.hardware.kv_bytes_per_element);
      s += step_seconds(preset.model, w, preset.hardware);
      start += len;
    }
    ms.push_back(1e3 * s);
  }
  return ms;
}

}  // namespace kvc::bench
