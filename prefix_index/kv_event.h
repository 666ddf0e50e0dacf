// KV cache events, in router key space (byte-block hashes): how a replica tells routers which
// prefix blocks it holds. Encoded as JSON for the /v1/kv_events SSE stream.
//
//   {"type":"stored","parent":"<16 hex>"|null,"hashes":["<16 hex>",...]}
//   {"type":"removed","hashes":[...]}
//   {"type":"cleared"}
//   {"type":"queued","parent":"<16 hex>"|null,"hashes":["<16 hex>",...]}
//   {"type":"work","seq":7,"tokens":4096,"sequences":4,"route":"<router's send id>"|null}
//   batch: {"replica":"r0","seq":12,"snapshot":false,"events":[...]}
//
// Hashes travel as 16-digit lower-case hex strings: JSON numbers above 2^53 do not survive every
// client.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "prefix_index/block_hash.h"

namespace kvc {

// Blocks `hashes` now held, chained: hashes[0]'s parent is `parent` (nullopt: the chain seed, i.e.
// hashes[0] is a first block), hashes[i]'s parent is hashes[i-1].
struct KvStored {
  std::optional<BlockHash> parent;
  std::vector<BlockHash> hashes;
  friend bool operator==(const KvStored&, const KvStored&) = default;
};

// Blocks no longer held (evicted).
struct KvRemoved {
  std::vector<BlockHash> hashes;
  friend bool operator==(const KvRemoved&, const KvRemoved&) = default;
};

// Everything the replica held is gone (restart, cache reset).
struct KvCleared {
  friend bool operator==(const KvCleared&, const KvCleared&) = default;
};

// Blocks a request queued here will compute, not held yet: the prompt's chain past the blocks
// the replica already holds (parent: its last held block; nullopt: none held). Routers count
// them held here for a short while (FleetIndexes::routed), so every router, not only the one
// that sent the request, places a prompt sharing them here while it waits and prefills; stored
// events follow for the blocks computed and cached (a byte block a cached token block never
// covers wholly is not; its entry expires). At most the first 8,192 blocks of a prompt, best
// effort. Sent only to subscribers that ask (/v1/kv_events?queued=1); their snapshot ends with
// one for each prompt not computed yet.
struct KvQueued {
  std::optional<BlockHash> parent;
  std::vector<BlockHash> hashes;
  friend bool operator==(const KvQueued&, const KvQueued&) = default;
};

// Work a request brought to the replica, announced when it was queued (to the subscribers that
// ask for them: /v1/kv_events?queued=1&work=1), so that every router counts it at once, not only
// the one that sent it (whose own count of it is local until the replica's next load report):
// `tokens` of work (the prefill it will compute past its cached prefix plus its planned completion,
// as the load report's queued_work_tokens counts it) and `sequences` (its samples). `seq` numbers
// the replica's announcements from 1; a load report's `work_seq` is the last one its figures hold,
// so a router counts an announcement until a report with work_seq >= seq. `route`: the router's
// id of the send (the x-kvcascade-route request header), empty when none came with it. Holds no
// prefix: the index ignores it.
struct KvWork {
  static constexpr size_t kMaxRouteBytes = 64;
  // What a replica takes as a route id (a router's ReplicaPool::route_of): 1-64 bytes of
  // lower-case hex digits, decimal digits and '-'. A replica ignores any other header value.
  static bool valid_route(std::string_view route);
  uint64_t seq = 0;
  int64_t tokens = 0;
  int64_t sequences = 0;
  std::string route;
  friend bool operator==(const KvWork&, const KvWork&) = default;
};

using KvEvent = std::variant<KvStored, KvRemoved, KvCleared, KvQueued, KvWork>;

// One SSE message. `seq` increases by one per batch on a stream, so a gap tells the subscriber it
// missed events and must resubscribe; a snapshot batch replaces everything known of the replica.
struct KvEventBatch {
  std::string replica;
  uint64_t seq = 0;
  bool snapshot = false;
  std::vector<KvEvent> events;
  friend bool operator==(const KvEventBatch&, const KvEventBatch&) = default;
};

// Limits on decoded input: a peer cannot make us allocate without bound.
struct KvEventLimits {
  size_t max_hashes_per_event = 1 << 20;
  size_t max_events_per_batch = 1 << 16;
  size_t max_text_bytes = 64 << 20;
  size_t max_route_bytes = 256;                 // KvWork::route
  int64_t max_work_tokens = 1'000'000'000'000;  // KvWork::tokens
  int64_t max_work_sequences = 1 << 20;         // KvWork::sequences
};

std::string format_block_hash(BlockHash h);                        // 16 lower-case hex digits
std::optional<BlockHash> parse_block_hash(std::string_view text);  // exactly 16 hex digits

nlohmann::json to_json(const KvEvent& event);
nlohmann::json to_json(const KvEventBatch& batch);
std::string encode_kv_event_batch(const KvEventBatch& batch);  // compact, one line
// The same in two parts, for a publisher with several subscribers: the events' JSON array
// (encode_kv_events) is the same for all of them, only `seq` differs; the second joins them
// into the batch's text, byte for byte what encode_kv_event_batch gives.
std::string encode_kv_events(std::span<const KvEvent> events);
std::string encode_kv_event_batch(std::string_view replica, uint64_t seq, bool snapshot,
                                  std::string_view events_json);

// Never throws: malformed JSON, wrong types, unknown "type", bad hashes, over-limit arrays and
// invalid UTF-8 all give an Error naming the offending field.
Result<KvEvent> decode_kv_event(const nlohmann::json& j, const KvEventLimits& limits = {});
Result<KvEventBatch> decode_kv_event_batch(std::string_view text, const KvEventLimits& limits = {});

}  // namespace kvc
