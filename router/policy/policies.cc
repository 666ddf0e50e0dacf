#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "router/policy/policy.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvc {

uint64_t rendezvous_score(uint64_t key, const std::string& replica_id) {
  return XXH3_64bits_withSeed(replica_id.data(), replica_id.size(), key);
}

namespace {

std::vector<const Candidate*> healthy(std::span<const Candidate> candidates) {
  std::vector<const Candidate*> out;
  for (const Candidate& c : candidates)
    if (c.healthy) out.push_back(&c);
  assert(!out.empty());
  return out;
}

// Sequences there: running and waiting as reported, plus what this router sent that the report
// does not have yet (a replica reporting its work), else every request in flight from here.
int64_t decode_load(const Candidate& c) {
  return c.running_sequences + c.waiting_sequences +
         (c.routed_work ? c.unacked_sequences : c.in_flight_requests);
}

uint64_t affinity(const RouteRequest& r) {
  return XXH3_64bits(r.affinity_key.data(), r.affinity_key.size());
}

// The candidate with the highest rendezvous score for `key` (ties cannot happen in practice;
// lowest replica index otherwise).
const Candidate* rendezvous(const std::vector<const Candidate*>& cs, uint64_t key) {
  const Candidate* best = nullptr;
  uint64_t best_score = 0;
  for (const Candidate* c : cs) {
    const uint64_t s = rendezvous_score(key, c->id);
    if (!best || s > best_score) best = c, best_score = s;
  }
  return best;
}

class RoundRobin final : public Policy {
 public:
  std::string name() const override { return "round_robin"; }
  RouteDecision choose(const RouteRequest&, std::span<const Candidate> candidates) override {
    const auto cs = healthy(candidates);
    return {cs[next_++ % cs.size()]->replica, "round_robin"};
  }

 private:
  uint64_t next_ = 0;
};

class LeastLoad final : public Policy {
 public:
  std::string name() const override { return "least_load"; }
  RouteDecision choose(const RouteRequest&, std::span<const Candidate> candidates) override {
    const auto cs = healthy(candidates);
    const Candidate* best = *std::min_element(cs.begin(), cs.end(), [](auto* a, auto* b) {
      return decode_load(*a) + a->queued_prefill_tokens / 256 <
             decode_load(*b) + b->queued_prefill_tokens / 256;
    });
    return {best->replica, "least_load"};
  }
};

class ConsistentHash final : public Policy {
 public:
  std::string name() const override { return "consistent_hash"; }
  RouteDecision choose(const RouteRequest& r, std::span<const Candidate> candidates) override {
    return {rendezvous(healthy(candidates), affinity(r))->replica, "consistent_hash"};
  }
};

// SGLang router's cache-aware rule (its Rust defaults: 0.5 / 32 / 1.1): when load is
// imbalanced, the shortest queue; otherwise the longest prefix match if it covers more than
// cache_threshold of the prompt, else the replica whose tree is smallest.
class SglangCacheAware final : public Policy {
 public:
  explicit SglangCacheAware(SglangPolicyConfig c) : c_(c) {}
  std::string name() const override { return "sglang_cache_aware"; }
  RouteDecision choose(const RouteRequest& r, std::span<const Candidate> candidates) override {
    const auto cs = healthy(candidates);
    auto load = [](const Candidate* c) { return c->in_flight_requests; };
    const auto [lo, hi] = std::minmax_element(cs.begin(), cs.end(),
                                              [&](auto* a, auto* b) { return load(a) < load(b); });
    const bool imbalanced = load(*hi) - load(*lo) > c_.balance_abs_threshold &&
                            static_cast<double>(load(*hi)) > c_.balance_rel_threshold * load(*lo);
    if (imbalanced) return {(*lo)->replica, "load_balance"};
    const Candidate* best = *std::max_element(cs.begin(), cs.end(), [](auto* a, auto* b) {
      return a->matched_blocks < b->matched_blocks;
    });
    const double rate = r.prompt_bytes > 0
                            ? static_cast<double>(best->matched_blocks * r.block_size) /
                                  static_cast<double>(r.prompt_bytes)
                            : 0.0;
    if (rate > c_.cache_threshold) return {best->replica, "prefix_match"};
    const Candidate* smallest = *std::min_element(
        cs.begin(), cs.end(), [](auto* a, auto* b) { return a->index_blocks < b->index_blocks; });
    return {smallest->replica, "smallest_tree"};
  }

 private:
  SglangPolicyConfig c_;
};

// cost(r) = a * uncached prefill tokens + b * queued prefill tokens + c * decode load, over the
// replicas a bounded-load rule allows; cold prompts by rendezvous of their first blocks, hot
// prefixes spread over the top rendezvous replicas when their holder is overloaded.
class KvCascade final : public Policy {
 public:
  explicit KvCascade(KvCascadePolicyConfig c) : c_(c) {}
  std::string name() const override { return "kvcascade"; }
  bool pins_siblings() const override { return true; }

  double retried(const RouteRequest& r, const Candidate& from, const Candidate& to) override {
    if (c_.work_bound_factor <= 0) return 0;
    if (declared_members(r) > 1) {
      // This member and the ones still to come (the router pins them to `to` now).
      if (auto it = groups_.find(*r.group); it != groups_.end() && it->second.replica == from.id) {
        return move_group(it->second, declared_members(r) - it->second.seen + 1, to.id);
      }
    }
    const double moved = std::min(planned_work(r, from), own(from.id));
    recent_[from.id] -= moved;
    recent_[to.id] += moved;
    return planned_work(r, to);
  }

  double record(const RouteRequest& r, const Candidate& chosen) override {
    if (c_.work_bound_factor <= 0) return 0;
    // A declared group is counted whole when its first member is placed (the others follow it
    // there), so groups placed meanwhile see it; its later members add nothing, unless they land
    // elsewhere (a pin that expired, a routing key): then the members still to come are counted
    // there instead. Once all members were seen the id is forgotten (clients reuse ids).
    const int32_t members = declared_members(r);
    if (members > 1) {
      if (auto it = groups_.find(*r.group); it != groups_.end()) {
        CountedGroup& g = it->second;
        const double moved =
            g.replica != chosen.id ? move_group(g, members - g.seen, chosen.id) : 0;
        if (++g.seen >= members) groups_.erase(it);
        return moved;
      }
    }
    const double w = planned_work(r, chosen);
    // One routed request per member: the decay and the mean request as if each came alone.
    const double decay = std::pow(c_.work_decay, members), keep = std::pow(0.99, members);
    for (auto& [id, v] : recent_)
      v *= decay;
    const double per = w / members;
    mean_request_ = mean_request_ == 0 ? per : keep * mean_request_ + (1 - keep) * per;
    recent_[chosen.id] += w;
    if (members > 1) {
      groups_[*r.group] = CountedGroup{chosen.id, per, 1};
      group_order_.push_back(*r.group);
      // Bounded: groups whose members never all come are forgotten oldest first.
      while (group_order_.size() > kCountedGroups) {
        groups_.erase(group_order_.front());
        group_order_.pop_front();
      }
    }
    return w;
  }

  RouteDecision choose(const RouteRequest& r, std::span<const Candidate> candidates) override {
    // A declared group's first member at this router is placed by what every router sees
    // alike (the replicas' reports and the index), without this router's own sends since: its
    // other members reach the other routers at the same moment, and the group must land whole.
    std::vector<Candidate> shared;
    const bool shared_view =
        c_.groups_by_shared_view && declared_members(r) > 1 &&
        std::any_of(candidates.begin(), candidates.end(),
                    [](const Candidate& c) { return c.routed_work.has_value(); });
    if (shared_view) {
      for (const Candidate& c : candidates) {
        shared.push_back(c);
        if (c.routed_work) {
          *shared.back().routed_work -= c.unacked_work;
          shared.back().unacked_sequences = 0;
        }
      }
      candidates = shared;
    }
    const auto cs = healthy(candidates);
    note_arrivals(cs);
    note_speeds(cs);
    int64_t total = 0;
    double speed_total = 0;
    for (const Candidate* c : cs) {
      total += decode_load(*c);
      speed_total += 1.0 / slowness(*c);
    }
    // Bounded load: nobody takes more than factor x its fair share after this request (its
    // share of the fleet's speed), plus a little slack so small or stale loads do not push a
    // prefix away from its holder.
    auto cap = [&](const Candidate& c) {
      return c_.bounded_load_factor * static_cast<double>(total + r.n) / slowness(c) / speed_total +
             static_cast<double>(r.n + c_.bounded_load_slack);
    };
    // Bounded work (KvCascadePolicyConfig::work_bound_factor). The slack is in mean requests:
    // over the fleet as the replicas report it (alike for every router), else what this
    // router routed.
    // (A shared-view decision before the fleet has a mean has no work bound: this router's own
    // mean is not what the others have.)
    const double mean_request = r.fleet_request_work.value_or(shared_view ? 0.0 : mean_request_);
    double work_total = 0;  // in the reference replica's time (slowness)
    for (const Candidate* c : cs)
      work_total += recent(*c) * slowness(*c);
    // A declared group lands whole where its first member goes: it is placed by the work of all
    // its members (planned_work).
    // Staying is worth the prefill that moving would redo: a replica holding more of the prompt
    // than any other may exceed the bound by work_lead_factor x that many tokens (once for a
    // group: its later members find the prompt cached wherever it goes).
    size_t top = 0, second = 0;  // the two longest matches
    for (const Candidate* c : cs) {
      second = std::max(second, std::min(top, c->matched_blocks));
      top = std::max(top, c->matched_blocks);
    }
    auto lead_tokens = [&](const Candidate& c) {
      return c.matched_blocks == top && top > second
                 ? c_.work_lead_factor * static_cast<double>(top - second) * r.block_size
                 : 0.0;
    };
    // c's work with this request and the most it may hold, both in the reference replica's
    // time (the bound infinite when off or without a mean yet).
    struct Work {
      double with, bound;
    };
    // KvCascadePolicyConfig::kind_factor: the bound is of c's own kind, the healthy replicas
    // whose slowness is within kind_factor of c's (on one kind of device, the fleet, summed in
    // the same order as work_total, so the same to the last bit); a kind of one replica (alone,
    // its own mean would never bound it) is bounded by the fleet's mean.
    const double kind_factor = std::max(c_.kind_factor, 1.0);
    auto kind_mean = [&](const Candidate& c, double w) {
      const double slow = slowness(c);
      double sum = 0, count = 0;
      for (const Candidate* o : cs) {
        const double so = slowness(*o);
        if (so <= slow * kind_factor && slow <= so * kind_factor) {
          sum += recent(*o) * so, count += 1;
        }
      }
      if (count < 2) sum = work_total, count = static_cast<double>(cs.size());
      return (sum + w) / count;
    };
    auto work_of = [&](const Candidate& c) {
      const double slow = slowness(c), w = planned_work(r, c) * slow;
      const double bound = c_.work_bound_factor <= 0 || mean_request == 0
                               ? std::numeric_limits<double>::infinity()
                               : c_.work_bound_factor * kind_mean(c, w) +
                                     c_.work_slack_requests * mean_request + lead_tokens(c) * slow;
      return Work{recent(c) * slow + w, bound};
    };
    auto work_ok = [&](const Candidate& c) {
      const Work w = work_of(c);
      return w.with <= w.bound;
    };
    std::vector<const Candidate*> allowed;
    for (const Candidate* c : cs) {
      if (static_cast<double>(decode_load(*c) + r.n) <= cap(*c) && work_ok(*c)) {
        allowed.push_back(c);
      }
    }
    const uint64_t key = affinity(r);
    const bool none_allowed = allowed.empty();
    if (none_allowed) {
      // The least loaded; equals (a cold start, a fleet that just emptied, where a request
      // larger than the slack fits nowhere) in rendezvous order, so routers agree.
      auto rank = [&](const Candidate* c) {
        const double slow = slowness(*c);
        return std::tuple(static_cast<double>(decode_load(*c)) * slow, recent(*c) * slow,
                          ~rendezvous_score(key, c->id));
      };
      allowed.push_back(*std::min_element(cs.begin(), cs.end(),
                                          [&](auto* a, auto* b) { return rank(a) < rank(b); }));
    }
    size_t longest = 0;
    for (const Candidate* c : cs)
      longest = std::max(longest, c->matched_blocks);

    // KvCascadePolicyConfig::holders_keep_prefixes: an allowed replica holding the longest
    // match, its KV cache not under pressure, keeps the request from those holding
    // holder_lead_bytes less or more, unless they are faster.
    double holder_slowness = std::numeric_limits<double>::infinity();
    if (c_.holders_keep_prefixes) {
      for (const Candidate* c : allowed) {
        if (c->matched_blocks == longest && c->kv_usage <= c_.kv_pressure_start) {
          holder_slowness = std::min(holder_slowness, slowness(*c));
        }
      }
    }
    auto kept_from = [&](const Candidate& c) {
      return c.matched_blocks < longest &&
             static_cast<double>(longest - c.matched_blocks) * r.block_size >=
                 c_.holder_lead_bytes &&
             slowness(c) >= holder_slowness;
    };
    // RouteRequest::explain: each healthy candidate's match, recent work and bound (both in the
    // reference replica's time, this request included), whether the bounds allow it (with
    // none_allowed, the least loaded is the one allowed), whether a holder keeps the request from
    // it, and its cost.
    auto decided = [&](const Candidate& chosen, const char* reason) {
      RouteDecision d{chosen.replica, reason, {}};
      if (!r.explain) return d;
      char buf[160];
      std::snprintf(buf, sizeof buf, "mean_request=%.0f work_total=%.0f none_allowed=%d",
                    mean_request, work_total, none_allowed ? 1 : 0);
      d.detail = buf;
      for (const Candidate* c : cs) {
        const bool ok = std::find(allowed.begin(), allowed.end(), c) != allowed.end();
        const Work w = work_of(*c);
        std::snprintf(buf, sizeof buf, " m=%zu w=%.0f b=%.0f s=%.2f ok=%d kept=%d cost=%.0f",
                      c->matched_blocks, w.with, w.bound, slowness(*c), ok ? 1 : 0,
                      kept_from(*c) ? 1 : 0, cost(r, *c));
        // Ids are printable ASCII without spaces or ';' where they enter (read_kvcascade_info;
        // else the replica's address): fit for a header value and a TSV column.
        d.detail += "; " + c->id + buf;
      }
      return d;
    };
    if (longest == 0) return decided(*rendezvous(allowed, key), "cold_rendezvous");
    const Candidate* best = nullptr;
    double best_cost = std::numeric_limits<double>::infinity();
    for (const Candidate* c : allowed) {
      if (kept_from(*c)) continue;
      const double cost = this->cost(r, *c);
      // Equal costs: rendezvous order, so independent routers agree.
      if (cost < best_cost ||
          (cost == best_cost && rendezvous_score(key, c->id) > rendezvous_score(key, best->id))) {
        best = c, best_cost = cost;
      }
    }
    // Costs that differ by less than the noise between routers' views (each sees the replicas'
    // load at its own poll, and its own requests in flight) are equal: among the candidates that
    // hold as much of the prompt as the cheapest, within tie_tokens of its cost, the rendezvous
    // order of the prompt's first block past that match decides, so routers agree (and copies
    // of one prompt, a group's members, land together). A match shorter than min_match_bytes
    // (the first block or two every prompt of a tenant shares) does not set that block: how far
    // such a match reaches is what routers see differently (a block stored a moment ago is in one
    // router's index and not yet in another's), so the prompt's last block (its whole chain) is
    // the key instead.
    if (c_.tie_tokens > 0) {
      const bool short_match =
          static_cast<double>(best->matched_blocks) * r.block_size < c_.min_match_bytes;
      uint64_t tie_key = key;  // the whole prompt matched: its affinity key
      if (short_match && !r.blocks.empty()) {
        tie_key = r.blocks.back().value;
      } else if (best->matched_blocks < r.blocks.size()) {
        tie_key = r.blocks[best->matched_blocks].value;
      }
      const Candidate* pick = best;
      for (const Candidate* c : allowed) {
        if (c->matched_blocks == best->matched_blocks && !kept_from(*c) &&
            this->cost(r, *c) <= best_cost + c_.tie_tokens &&
            rendezvous_score(tie_key, c->id) > rendezvous_score(tie_key, pick->id)) {
          pick = c;
        }
      }
      best = pick;
    }
    // A holder of the longest match under the bounds (not only the first found): then `best` is
    // the choice, and the spread below (which ranks every allowed replica) is not needed.
    const bool holder_allowed = std::any_of(allowed.begin(), allowed.end(),
                                            [&](auto* c) { return c->matched_blocks == longest; });
    if (!holder_allowed && best->matched_blocks > 0) {
      // The holder is over its bound but another replica under it holds part of the prefix: the
      // cheapest of those (the prefix has replicated there before).
      return decided(*best, "hot_spread");
    }
    if (!holder_allowed) {
      // The prefix is hot and its holder overloaded: spread it over the top rendezvous replicas.
      std::vector<const Candidate*> ranked = allowed;
      std::sort(ranked.begin(), ranked.end(), [&](auto* a, auto* b) {
        return rendezvous_score(key, a->id) > rendezvous_score(key, b->id);
      });
      ranked.resize(std::min<size_t>(ranked.size(), static_cast<size_t>(c_.hot_spread)));
      const Candidate* spread =
          *std::min_element(ranked.begin(), ranked.end(),
                            [&](auto* a, auto* b) { return cost(r, *a) < cost(r, *b); });
      return decided(*spread, "hot_spread");
    }
    return decided(*best, best->matched_blocks > 0 ? "prefix_match" : "least_cost");
  }

 private:
  double cost(const RouteRequest& r, const Candidate& c) const {
    const int64_t cached = static_cast<int64_t>(c.matched_blocks) * r.block_size;
    const int64_t uncached = std::max<int64_t>(0, r.prompt_bytes - cached);
    const double pressure =
        c.kv_usage > c_.kv_pressure_start
            ? (std::min(c.kv_usage, 1.0) - c_.kv_pressure_start) / (1.0 - c_.kv_pressure_start)
            : 0.0;
    const double queued =
        static_cast<double>(c.queued_prefill_tokens) + pressure * c_.kv_pressure_tokens;
    const double a =
        c_.weight_uncached_prefill /
        (c.load_busy && c_.busy_cap > 0 ? 1.0 - std::clamp(*c.load_busy, 0.0, c_.busy_cap) : 1.0);
    return slowness(c) * (c_.weight_steps * kReferenceStepWorkTokens +
                          a * static_cast<double>(uncached) + c_.weight_queued_prefill * queued +
                          c_.weight_decode * static_cast<double>(decode_load(c) + r.n));
  }

  // KvCascadePolicyConfig::costs_by_step_model: each healthy candidate's seconds per token over
  // the fleet's geometric mean of them (1 within speed_tolerance of it, or without a model),
  // by replica index, for slowness() during this decision. The geometric mean moves little when
  // one replica comes or goes, where a median can jump from one kind of device to another. It is
  // of the figures replicas vouch for (Candidate::seconds_per_token; none: every replica counts
  // as 1); a withheld figure (uncertain_seconds_per_token) only where it is faster than it.
  void note_speeds(const std::vector<const Candidate*>& cs) {
    slowness_.clear();
    if (!c_.costs_by_step_model) return;
    auto usable = [](const std::optional<double>& f) {
      return f && std::isfinite(*f) && *f >= kMinSecondsPerToken ? *f : 0.0;
    };
    double log_sum = 0;
    int known = 0;
    for (const Candidate* c : cs) {
      if (const double f = usable(c->seconds_per_token); f > 0) log_sum += std::log(f), ++known;
    }
    if (known == 0) return;
    const double reference = std::exp(log_sum / known);
    for (const Candidate* c : cs) {
      // An uncertain figure counts only where it makes the replica faster than the mean.
      double f = usable(c->seconds_per_token);
      if (f == 0) f = std::min(usable(c->uncertain_seconds_per_token), reference);
      if (f == 0) continue;
      const double ratio = std::clamp(f / reference, 1.0 / kMaxSlowness, kMaxSlowness);
      if (ratio > 1.0 + c_.speed_tolerance || ratio < 1.0 / (1.0 + c_.speed_tolerance)) {
        if (slowness_.size() <= c->replica) slowness_.resize(c->replica + 1, 1.0);
        slowness_[c->replica] = ratio;
      }
    }
  }
  double slowness(const Candidate& c) const {
    return c.replica < slowness_.size() ? slowness_[c.replica] : 1.0;
  }

  // A replica healthy now that was not at the last decision (back from a restart or a stall, or
  // new to the pool): while it was away the others were sent its share, so its recent work,
  // against theirs, would let the bound send it every request until it caught up. It restarts at
  // the others' mean instead, and takes its share (the decode load it reports and what this
  // router sends it decide how much more). This is for this router's own count; the work a
  // replica reports restarts the same way in the pool (ReplicaView::routed_work).
  void note_arrivals(const std::vector<const Candidate*>& cs) {
    double stayed_work = 0;
    int stayed = 0;
    std::vector<const Candidate*> arrived;
    for (const Candidate* c : cs) {
      if (last_healthy_.contains(c->id)) {
        stayed_work += own(c->id);
        ++stayed;
      } else {
        arrived.push_back(c);
      }
    }
    if (stayed > 0 && c_.work_bound_factor > 0) {
      for (const Candidate* c : arrived)
        recent_[c->id] = stayed_work / stayed;
    }
    if (!arrived.empty() || stayed != static_cast<int>(last_healthy_.size())) {
      last_healthy_.clear();
      for (const Candidate* c : cs)
        last_healthy_.insert(c->id);
    }
  }

  struct CountedGroup {
    std::string replica;  // where its work is counted
    double per_member = 0;
    int32_t seen = 0;  // members recorded so far
  };
  // Moves `members` members' share of a group's counted work to replica `to`; returns it.
  double move_group(CountedGroup& g, int32_t members, const std::string& to) {
    const double moved = std::min(g.per_member * members, own(g.replica));
    recent_[g.replica] -= moved;
    recent_[to] += moved;
    g.replica = to;
    return g.per_member * members;
  }
  // What this router routed to the replica lately (decayed per routed request).
  double own(const std::string& id) const {
    auto it = recent_.find(id);
    return it == recent_.end() ? 0.0 : it->second;
  }
  // The replica's recent work: as every router sees it where it reports it, else this router's
  // own count.
  double recent(const Candidate& c) const { return c.routed_work ? *c.routed_work : own(c.id); }
  static int32_t declared_members(const RouteRequest& r) {
    return r.group && r.group_size > 1 ? r.group_size : 1;
  }
  // The work a request brings to c: its uncached prompt once (a declared group's later members
  // find it cached) and every sample's completion (all members' for a group's first member).
  static double planned_work(const RouteRequest& r, const Candidate& c) {
    const int64_t cached = static_cast<int64_t>(c.matched_blocks) * r.block_size;
    return static_cast<double>(std::max<int64_t>(0, r.prompt_bytes - cached)) +
           static_cast<double>(declared_members(r)) * static_cast<double>(r.n) *
               static_cast<double>(std::max<int64_t>(r.max_tokens, 1));
  }

  static constexpr size_t kCountedGroups = 8192;
  KvCascadePolicyConfig c_;
  std::unordered_map<std::string, double> recent_;        // replica id -> decayed routed work
  double mean_request_ = 0;                               // mean work of a request (EWMA)
  std::unordered_map<std::string, CountedGroup> groups_;  // declared groups being counted
  std::deque<std::string> group_order_;                   // ...oldest first (bounded)
  std::unordered_set<std::string> last_healthy_;          // at the last choose() (note_arrivals)
  // This decision's candidates' slowness (note_speeds), by replica index (1 past its end).
  std::vector<double> slowness_;
  // Figures below a nanosecond per token are no step model's; slowness stays within 64x.
  static constexpr double kMinSecondsPerToken = 1e-9, kMaxSlowness = 64;
};

}  // namespace

RouteDecision route_by_key(std::string_view key, std::span<const Candidate> candidates) {
  const uint64_t h = XXH3_64bits(key.data(), key.size());
  return {rendezvous(healthy(candidates), h)->replica, "routing_key"};
}

std::unique_ptr<Policy> make_kvcascade_policy(KvCascadePolicyConfig config) {
  return std::make_unique<KvCascade>(config);
}

std::unique_ptr<Policy> make_sglang_policy(SglangPolicyConfig config) {
  return std::make_unique<SglangCacheAware>(config);
}

std::unique_ptr<Policy> make_policy(const std::string& name) {
  if (name == "kvcascade") return make_kvcascade_policy({});
  if (name == "kvcascade_tokens") {
    KvCascadePolicyConfig tokens;
    tokens.costs_by_step_model = false;
    return make_kvcascade_policy(tokens);
  }
  if (name == "round_robin") return std::make_unique<RoundRobin>();
  if (name == "least_load") return std::make_unique<LeastLoad>();
  if (name == "consistent_hash") return std::make_unique<ConsistentHash>();
  if (name == "sglang_cache_aware") return make_sglang_policy({});
  return nullptr;
}

std::vector<std::string> policy_names() {
  return {"kvcascade",       "round_robin",        "least_load",
          "consistent_hash", "sglang_cache_aware", "kvcascade_tokens"};
}

}  // namespace kvc
