#include "prefix_index/kv_event.h"

#include <algorithm>
#include <limits>
#include <new>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/hex.h"
#include "base/utf8.h"

namespace kvc {
namespace {

using nlohmann::json;

constexpr char kStored[] = "stored";
constexpr char kRemoved[] = "removed";
constexpr char kCleared[] = "cleared";
constexpr char kQueued[] = "queued";
constexpr char kWork[] = "work";
constexpr char kBatchName[] = "kv event batch";
constexpr char kExpectedHash[] = "expected a 16-digit hex string";

// Error messages echo peer input and library messages, and end up inside JSON error bodies and
// logs: keep them short and valid UTF-8 (invalid bytes become U+FFFD).
constexpr size_t kMaxEchoBytes = 64;
constexpr size_t kMaxLibraryMessageBytes = 256;

std::string printable(std::string_view text, size_t max_bytes = kMaxEchoBytes) {
  return valid_utf8(text.substr(0, max_bytes));
}

// nlohmann prefixes messages with "[json.exception.parse_error.101] "; the rest is for people.
std::string library_message(const json::exception& e) {
  std::string_view what = e.what();
  if (const size_t end = what.find("] "); what.starts_with("[json.") && end != what.npos) {
    what.remove_prefix(end + 2);
  }
  return printable(what, kMaxLibraryMessageBytes);
}

std::string join(std::string_view prefix, std::string_view name) {
  std::string out(prefix);
  if (!out.empty()) out += '.';
  out += name;
  return out;
}

std::string indexed(std::string_view field, size_t i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

Error field_error(std::string_view field, std::string_view what) {
  return Error{std::string(field) + ": " + std::string(what)};
}

Error over_limit(std::string_view field, size_t count, std::string_view limit_name, size_t limit) {
  return field_error(field, std::to_string(count) + " entries, over " + std::string(limit_name) +
                                " (" + std::to_string(limit) + ")");
}

// nullptr when absent. Precondition: object.is_object().
const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::optional<BlockHash> hash_value(const json& j) {
  if (!j.is_string()) return std::nullopt;
  return parse_block_hash(j.get_ref<const std::string&>());
}

json hash_array(const std::vector<BlockHash>& hashes) {
  json out = json::array();
  out.get_ref<json::array_t&>().reserve(hashes.size());
  for (const BlockHash h : hashes)
    out.push_back(format_block_hash(h));
  return out;
}

// A stored or queued event: a parent and the chain after it.
template <typename Chain>
json chain_json(const char* type, const Chain& e) {
  return json{{"type", type},
              {"parent", e.parent ? json(format_block_hash(*e.parent)) : json(nullptr)},
              {"hashes", hash_array(e.hashes)}};
}
json event_json(const KvStored& e) {
  return chain_json(kStored, e);
}
json event_json(const KvQueued& e) {
  return chain_json(kQueued, e);
}
json event_json(const KvRemoved& e) {
  return json{{"type", kRemoved}, {"hashes", hash_array(e.hashes)}};
}
json event_json(const KvCleared&) {
  return json{{"type", kCleared}};
}
json event_json(const KvWork& e) {
  return json{{"type", kWork},
              {"seq", e.seq},
              {"tokens", e.tokens},
              {"sequences", e.sequences},
              {"route", e.route.empty() ? json(nullptr) : json(e.route)}};
}

// `event` is the object holding "hashes"; `prefix` names it ("" or "events[3]").
Result<std::vector<BlockHash>> decode_hashes(const json& event, std::string_view prefix,
                                             const KvEventLimits& limits) {
  const std::string field = join(prefix, "hashes");
  const json* array = member(event, "hashes");
  if (array == nullptr) return field_error(field, "missing");
  if (!array->is_array()) return field_error(field, "expected an array of 16-digit hex strings");
  // Checked before reserving: the count comes from the peer.
  if (array->size() > limits.max_hashes_per_event) {
    return over_limit(field, array->size(), "max_hashes_per_event", limits.max_hashes_per_event);
  }
  std::vector<BlockHash> hashes;
  hashes.reserve(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    const std::optional<BlockHash> h = hash_value((*array)[i]);
    if (!h) return field_error(indexed(field, i), kExpectedHash);
    hashes.push_back(*h);
  }
  return hashes;
}

template <typename Chain>
Result<KvEvent> decode_chain(const json& j, std::string_view prefix, const KvEventLimits& limits) {
  Chain stored;
  // Absent and null both mean "hashes[0] is a first block".
  if (const json* parent = member(j, "parent"); parent != nullptr && !parent->is_null()) {
    stored.parent = hash_value(*parent);
    if (!stored.parent)
      return field_error(join(prefix, "parent"), "expected a 16-digit hex string or null");
  }
  Result<std::vector<BlockHash>> hashes = decode_hashes(j, prefix, limits);
  if (!hashes) return hashes.error();
  stored.hashes = std::move(hashes).value();
  return KvEvent(std::move(stored));
}

Result<KvEvent> decode_removed(const json& j, std::string_view prefix,
                               const KvEventLimits& limits) {
  Result<std::vector<BlockHash>> hashes = decode_hashes(j, prefix, limits);
  if (!hashes) return hashes.error();
  return KvEvent(KvRemoved{std::move(hashes).value()});
}

}  // namespace

bool KvWork::valid_route(std::string_view route) {
  return !route.empty() && route.size() <= kMaxRouteBytes &&
         std::all_of(route.begin(), route.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-';
         });
}

namespace {

// An integer field of `min` (>= 0) or more, up to `max`.
Result<uint64_t> decode_count(const json& j, std::string_view prefix, const char* key, uint64_t min,
                              uint64_t max) {
  const std::string field = join(prefix, key);
  const json* v = member(j, key);
  if (v == nullptr) return field_error(field, "missing");
  uint64_t n = 0;
  if (v->is_number_unsigned()) {
    n = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    n = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    return field_error(field, "expected an integer of at least " + std::to_string(min));
  }
  if (n < min || n > max) {
    return field_error(
        field, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
  return n;
}

Result<KvEvent> decode_work(const json& j, std::string_view prefix, const KvEventLimits& limits) {
  KvWork w;
  Result<uint64_t> seq = decode_count(j, prefix, "seq", 1, std::numeric_limits<uint64_t>::max());
  if (!seq) return seq.error();
  // Bounded: the router adds them up.
  Result<uint64_t> tokens =
      decode_count(j, prefix, "tokens", 0, static_cast<uint64_t>(limits.max_work_tokens));
  if (!tokens) return tokens.error();
  Result<uint64_t> sequences =
      decode_count(j, prefix, "sequences", 0, static_cast<uint64_t>(limits.max_work_sequences));
  if (!sequences) return sequences.error();
  w.seq = *seq;
  w.tokens = static_cast<int64_t>(*tokens);
  w.sequences = static_cast<int64_t>(*sequences);
  if (const json* route = member(j, "route"); route != nullptr && !route->is_null()) {
    const std::string field = join(prefix, "route");
    if (!route->is_string()) return field_error(field, "expected a string or null");
    const std::string& text = route->get_ref<const std::string&>();
    if (text.size() > limits.max_route_bytes) {
      return field_error(field, std::to_string(text.size()) + " bytes, over max_route_bytes " +
                                    std::to_string(limits.max_route_bytes));
    }
    w.route = text;
  }
  return KvEvent(std::move(w));
}

// `prefix` names the event inside a batch ("events[3]"), or is empty for a lone event.
Result<KvEvent> decode_event(const json& j, std::string_view prefix, const KvEventLimits& limits) {
  if (!j.is_object()) return field_error(prefix.empty() ? "event" : prefix, "expected an object");
  const std::string type_field = join(prefix, "type");
  const json* type = member(j, "type");
  if (type == nullptr) return field_error(type_field, "missing");
  if (!type->is_string()) return field_error(type_field, "expected a string");
  const std::string& name = type->get_ref<const std::string&>();
  if (name == kStored) return decode_chain<KvStored>(j, prefix, limits);
  if (name == kRemoved) return decode_removed(j, prefix, limits);
  if (name == kCleared) return KvEvent(KvCleared{});
  if (name == kQueued) return decode_chain<KvQueued>(j, prefix, limits);
  if (name == kWork) return decode_work(j, prefix, limits);
  return field_error(type_field, "unknown event type '" + printable(name) +
                                     "' (expected stored, removed, cleared, queued or work)");
}

Result<std::vector<KvEvent>> decode_events(const json& batch, const KvEventLimits& limits) {
  const json* events = member(batch, "events");
  if (events == nullptr) return field_error("events", "missing");
  if (!events->is_array()) return field_error("events", "expected an array");
  // Checked before reserving: the count comes from the peer.
  if (events->size() > limits.max_events_per_batch) {
    return over_limit("events", events->size(), "max_events_per_batch",
                      limits.max_events_per_batch);
  }
  std::vector<KvEvent> out;
  out.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    Result<KvEvent> event = decode_event((*events)[i], indexed("events", i), limits);
    if (!event) return event.error();
    out.push_back(std::move(event).value());
  }
  return out;
}

Result<KvEventBatch> decode_batch(const json& j, const KvEventLimits& limits) {
  if (!j.is_object()) return field_error(kBatchName, "expected an object");
  KvEventBatch batch;
  const json* replica = member(j, "replica");
  if (replica == nullptr) return field_error("replica", "missing");
  if (!replica->is_string()) return field_error("replica", "expected a string");
  batch.replica = replica->get<std::string>();

  Result<uint64_t> seq = decode_count(j, "", "seq", 0, std::numeric_limits<uint64_t>::max());
  if (!seq) return seq.error();
  batch.seq = *seq;

  const json* snapshot = member(j, "snapshot");
  if (snapshot == nullptr) return field_error("snapshot", "missing");
  if (!snapshot->is_boolean()) return field_error("snapshot", "expected true or false");
  batch.snapshot = snapshot->get<bool>();

  Result<std::vector<KvEvent>> events = decode_events(j, limits);
  if (!events) return events.error();
  batch.events = std::move(events).value();
  return batch;
}

}  // namespace

std::string format_block_hash(BlockHash h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[i] = kDigits[h.value & 0xf];
    h.value >>= 4;
  }
  return out;
}

std::optional<BlockHash> parse_block_hash(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    const int digit = hex_digit(c);
    if (digit < 0) return std::nullopt;
    value = (value << 4) | static_cast<uint64_t>(digit);
  }
  return BlockHash{value};
}

nlohmann::json to_json(const KvEvent& event) {
  return std::visit([](const auto& e) { return event_json(e); }, event);
}

nlohmann::json to_json(const KvEventBatch& batch) {
  json events = json::array();
  events.get_ref<json::array_t&>().reserve(batch.events.size());
  for (const KvEvent& e : batch.events)
    events.push_back(to_json(e));
  return json{{"replica", batch.replica},
              {"seq", batch.seq},
              {"snapshot", batch.snapshot},
              {"events", std::move(events)}};
}

std::string encode_kv_event_batch(const KvEventBatch& batch) {
  return encode_kv_event_batch(batch.replica, batch.seq, batch.snapshot,
                               encode_kv_events(batch.events));
}

std::string encode_kv_events(std::span<const KvEvent> events) {
  std::string out = "[";
  for (const KvEvent& e : events) {
    if (out.size() > 1) out += ',';
    // Hashes, type names and numbers are ASCII; a work event's route is checked by the replica
    // (KvWork::valid_route), and invalid UTF-8 that got past it is replaced, not thrown on.
    out += to_json(e).dump(-1, ' ', false, json::error_handler_t::replace);
  }
  out += ']';
  return out;
}

std::string encode_kv_event_batch(std::string_view replica, uint64_t seq, bool snapshot,
                                  std::string_view events_json) {
  // nlohmann's key order (sorted), as to_json(batch).dump() writes it. `replica` comes from
  // configuration and may not be valid UTF-8; replacing beats throwing.
  std::string out = "{\"events\":";
  out.reserve(events_json.size() + replica.size() + 64);
  out += events_json;
  out += ",\"replica\":";
  out += json(std::string(replica)).dump(-1, ' ', false, json::error_handler_t::replace);
  out += ",\"seq\":";
  out += std::to_string(seq);
  out += snapshot ? ",\"snapshot\":true}" : ",\"snapshot\":false}";
  return out;
}

Result<KvEvent> decode_kv_event(const nlohmann::json& j, const KvEventLimits& limits) {
  return decode_event(j, "", limits);
}

Result<KvEventBatch> decode_kv_event_batch(std::string_view text, const KvEventLimits& limits) {
  // Checked before parsing: the parsed document costs several times the text's size.
  if (text.size() > limits.max_text_bytes) {
    return field_error(kBatchName, std::to_string(text.size()) + " bytes, over max_text_bytes (" +
                                       std::to_string(limits.max_text_bytes) + ")");
  }
  json j;
  try {
    // The parser also rejects invalid UTF-8 and lone surrogate escapes inside strings.
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return field_error(kBatchName, "invalid JSON: " + library_message(e));
  } catch (const std::bad_alloc&) {
    return field_error(kBatchName, "out of memory while parsing");
  }
  return decode_batch(j, limits);
}

}  // namespace kvc
