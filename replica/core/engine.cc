#include "replica/core/engine.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <span>
#include <unordered_set>

namespace kvc {
namespace {

// Bytes at the end of `text` that could still grow into a stop string: held back from streaming.
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

// Bytes at the end of text[0, end) that begin a UTF-8 sequence still missing its continuation
// bytes: held back from streaming, so a character split over two tokens is sent whole (a client
// decoding each delta would otherwise see two replacement characters where the whole text has
// one character).
size_t utf8_holdback(const std::string& text, size_t end) {
  for (size_t k = 1; k <= 3 && k <= end; ++k) {
    const auto c = static_cast<unsigned char>(text[end - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = (c & 0xE0) == 0xC0   ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 1;
    return need > k ? k : 0;
  }
  return 0;  // only continuation bytes (or none): nothing a later byte could complete
}

}  // namespace

Engine::Engine(Backend& backend, const Tokenizer& tokenizer, EngineConfig config,
               const Clock& clock)
    : backend_(backend),
      tokenizer_(tokenizer),
      config_(config),
      clock_(clock),
      pool_(backend.num_blocks(), backend.block_size(), config.cold_reuse_rate,
            backend.num_host_blocks()),
      kv_(pool_),
      scheduler_(config.scheduler, kv_),
      planner_(config.cascade, backend.block_size(), backend.kv_bytes_per_token()),
      key_space_(kvc::key_space(tokenizer.tokens_are_bytes(), tokenizer.round_trips())) {
  if (key_space_ == KeySpace::kTokenIds) {
    byte_space_.emplace();
    kv_.set_byte_space(&*byte_space_);
  }
  // The model's own end ids (generation_config.json: Llama 3 Instruct ends on any of three) are
  // ids of its tokenizer: the byte tokenizer's ids are bytes, which they do not name.
  if (!tokenizer.tokens_are_bytes()) model_eos_ = backend.config().eos_token_ids;
}

bool Engine::is_eos(int32_t token) const {
  return tokenizer_.is_eos(token) ||
         std::find(model_eos_.begin(), model_eos_.end(), token) != model_eos_.end();
}

std::vector<int32_t> Engine::eos_token_ids() const {
  std::vector<int32_t> ids = tokenizer_.eos_tokens();
  ids.insert(ids.end(), model_eos_.begin(), model_eos_.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> Engine::model_eos_not_applied() const {
  std::vector<int32_t> ids;
  for (int32_t id : backend_.config().eos_token_ids)
    if (!is_eos(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

BlockHash Engine::chain_seed(const std::string& cache_salt) const {
  return kvc::chain_seed(backend_.config().name, cache_salt);
}

std::vector<KvEvent> Engine::take_kv_events() {
  std::vector<KvEvent> events = pool_.take_events();
  switch (key_space_) {
    case KeySpace::kBytes:
      break;
    case KeySpace::kTokenIds:
      events = byte_space_->translate(events);
      break;
    case KeySpace::kPrivateTokenIds:
      events.clear();
      break;
  }
  for (KvQueued& q : queued_.events)
    events.emplace_back(std::move(q));
  queued_.clear();
  for (KvWork& w : work_)
    events.emplace_back(std::move(w));
  work_.clear();
  return events;
}

void Engine::note_work(const SequenceGroup& g, const std::string& route) {
  // Bounded (an engine whose events nobody takes): the newest are kept, the oldest are in the
  // next load report anyway.
  if (work_.size() >= kMaxWorkEvents) work_.pop_front();
  work_.push_back(KvWork{++work_seq_, scheduler_.new_group_work(g), g.num_samples, route});
}

void Engine::note_queued(const SequenceGroup& g) {
  add_queued(g, queued_, kMaxQueuedBlocks);
}

void Engine::add_queued(const SequenceGroup& g, QueuedEvents& queued, size_t max_blocks) const {
  if (queued.blocks >= max_blocks) return;
  std::optional<KvQueued> q = queued_event(g, max_blocks - queued.blocks);
  if (!q) return;
  const uint64_t key = q->hashes.back().value ^ (q->hashes.size() * 0x9E3779B97F4A7C15ull);
  const auto [it, added] = queued.index.try_emplace(key, queued.events.size());
  // An equal event is there; a different one under the same key (a 64-bit collision) is kept.
  if (!added && queued.events[it->second] == *q) return;
  queued.blocks += q->hashes.size();
  queued.events.push_back(std::move(*q));
}

std::optional<KvQueued> Engine::queued_event(const SequenceGroup& g, size_t budget) const {
  if (!g.prompt_template || key_space_ == KeySpace::kPrivateTokenIds || budget == 0) {
    return std::nullopt;
  }
  const SequenceKeys& keys = g.prompt_template->keys;
  const bool token_ids = key_space_ == KeySpace::kTokenIds;
  const std::vector<BlockHash>& chain = token_ids ? keys.byte_hashes() : keys.hashes();
  // Leading blocks published already: the pool's cached prefix (its keys are the router's with
  // the byte tokenizer), else the byte blocks the cached token blocks cover.
  size_t held = 0;
  if (token_ids) {
    while (held < chain.size() && byte_space_->publishes(chain[held]))
      ++held;
  } else {
    held = static_cast<size_t>(
        kv_.find_cached_prefix(*g.prompt_template, std::numeric_limits<int32_t>::max()).blocks);
  }
  if (held == chain.size()) return std::nullopt;
  // The first blocks past the held ones: what a prompt sharing them matches first.
  const size_t n = std::min({chain.size() - held, kMaxQueuedBlocksPerPrompt, budget});
  KvQueued q;
  if (held > 0) q.parent = chain[held - 1];
  q.hashes.assign(chain.begin() + static_cast<std::ptrdiff_t>(held),
                  chain.begin() + static_cast<std::ptrdiff_t>(held + n));
  return q;
}

std::vector<KvEvent> Engine::kv_snapshot(bool queued) const {
  std::vector<KvEvent> events;
  switch (key_space_) {
    case KeySpace::kBytes:
      events = pool_.snapshot();
      break;
    case KeySpace::kTokenIds:
      events = byte_space_->snapshot(pool_.snapshot());
      break;
    case KeySpace::kPrivateTokenIds:
      return {};
  }
  if (!queued) return events;
  // A running group's computed blocks are published: only the rest of its prompt is queued.
  QueuedEvents announced;
  for (const auto& g : scheduler_.running())
    add_queued(*g, announced, kMaxSnapshotQueuedBlocks);
  for (const auto& g : scheduler_.waiting())
    add_queued(*g, announced, kMaxSnapshotQueuedBlocks);
  for (KvQueued& q : announced.events)
    events.emplace_back(std::move(q));
  return events;
}

void Engine::hash_token(Sequence& s, int32_t token) const {
  s.keys.append(token, [this](int32_t t) { return tokenizer_.token_bytes(t); });
}

Sequence Engine::prompt_sequence(const SequenceGroup& g, const std::string& cache_salt) const {
  // Token-id chains are the replica's own: seeded apart from the router's byte chains.
  const BlockHash token_seed = kvc::chain_seed(
      backend_.config().name + '\x1f' + "token-ids:" + tokenizer_.name(), cache_salt);
  Sequence s(-1, SequenceKeys(key_space_, backend_.block_size(), g.chain_seed, token_seed));
  s.tokens = g.prompt;
  for (int32_t t : g.prompt)
    hash_token(s, t);
  return s;
}

Result<std::unique_ptr<SequenceGroup>> Engine::prepare(GenerationRequest request) {
  const int32_t vocab = std::min(tokenizer_.vocab_size(), backend_.config().vocab_size);
  for (int32_t t : request.prompt) {
    // The byte tokenizer's EOS (256) is no byte: it cannot be part of a prompt.
    if (t < 0 || t >= vocab || (key_space_ == KeySpace::kBytes && t == tokenizer_.eos_token())) {
      return Error{"prompt token " + std::to_string(t) + " is not a valid input token"};
    }
  }
  if (request.params.max_tokens < 1) return Error{"max_tokens must be at least 1"};
  auto g = std::make_unique<SequenceGroup>();
  g->num_samples = request.n;
  g->prompt = std::move(request.prompt);
  g->params = std::move(request.params);
  g->chain_seed = chain_seed(request.cache_salt);
  g->prompt_template = prompt_sequence(*g, request.cache_salt);
  g->affinity = std::move(request.affinity);
  if (!g->affinity.empty()) g->declared_affinity_size = request.affinity_size;
  g->arrived = clock_.now();
  // A sample that only max_tokens ends has a certain length, open or not.
  g->open_completion = request.open_completion && !g->params.runs_to_max_tokens();
  if (request.max_tokens_is_default) {
    g->params.max_tokens =
        std::max(1, std::min(g->params.max_tokens, scheduler_.max_tokens_fit(*g)));
  }
  if (Status s = scheduler_.check_fits(*g); !s.ok()) return Error{s.message()};
  return g;
}

Result<uint64_t> Engine::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  Result<std::vector<uint64_t>> ids = submit_all(std::move(one));  // one's error is its own
  if (!ids.ok()) return ids.error();
  return ids->front();
}

Result<std::vector<uint64_t>> Engine::submit_all(std::vector<GenerationRequest> requests) {
  std::vector<std::unique_ptr<SequenceGroup>> groups;
  std::vector<std::string> routes;
  for (size_t i = 0; i < requests.size(); ++i) {
    routes.push_back(std::move(requests[i].route));
    Result<std::unique_ptr<SequenceGroup>> g = prepare(std::move(requests[i]));
    if (!g.ok()) {
      if (requests.size() == 1) return g.error();
      return Error{"prompt[" + std::to_string(i) + "]: " + g.error().message};
    }
    groups.push_back(std::move(*g));
  }
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < groups.size(); ++i) {
    std::unique_ptr<SequenceGroup>& g = groups[i];
    ids.push_back(g->id = next_group_id_++);
    note_queued(*g);
    const SequenceGroup& added = *g;
    scheduler_.add(std::move(g));
    note_work(added, routes[i]);
  }
  return ids;
}

void Engine::abort(uint64_t group_id) {
  scheduler_.abort(group_id);
}

Status Engine::replace_weights(const std::string& folder, int32_t* flushed) {
  assert(!scheduler_.has_started_work());
  const Status loaded = backend_.load_weights(folder);
  // The old KV stays valid only when nothing was written (a refused checkpoint).
  if (loaded.ok() || !backend_.weights_intact()) {
    const int32_t n = pool_.clear_hashes();
    if (flushed != nullptr) *flushed = n;
  }
  return loaded;
}

std::vector<SequenceGroup*> Engine::prompt_members(SequenceGroup& group) const {
  std::vector<SequenceGroup*> members{&group};
  for (SequenceGroup* f : scheduler_.prompt_followers(group))
    members.push_back(f);
  return members;
}

ForwardBatch Engine::build_batch(const SchedulerOutput& work, StepStats& stats) {
  ForwardBatch batch;
  // Moves of earlier schedules without work first (SchedulerOutput::kv_moves).
  batch.kv_moves = std::exchange(carried_moves_, {});
  batch.kv_moves.insert(batch.kv_moves.end(), work.kv_moves.begin(), work.kv_moves.end());
  for (const KvTransfer& t : batch.kv_moves) {
    stats.num_host_offloads += t.kind == KvTransfer::Kind::kOffload ? 1 : 0;
    stats.num_host_loads += t.kind == KvTransfer::Kind::kLoad ? 1 : 0;
    stats.num_block_copies += t.kind == KvTransfer::Kind::kCopy ? 1 : 0;
  }
  for (const ScheduledChunk& c : work.prefill) {
    const Sequence& s = c.seq();
    PrefillChunk chunk;
    chunk.tokens.assign(s.tokens.begin() + c.start, s.tokens.begin() + c.start + c.length);
    chunk.start_pos = c.start;
    chunk.block_table.assign(s.block_table.begin(),
                             s.block_table.begin() + kv_.blocks_for(c.start + c.length));
    chunk.want_logits = c.want_logits;
    stats.num_prefill_tokens += c.length;
    batch.prefill.add(chunk);
  }
  // Tokens to draw, in the order step() consumes them: each new group's n first tokens from its
  // prompt's last logits row, then one per decode.
  const bool processed = config_.processed_logprobs;
  auto request = [processed](int32_t row, const SequenceGroup& g, int32_t sibling,
                             int32_t position) {
    const SamplingParams& p = g.params;
    return SampleRequest{row,      sibling, position, p.temperature,
                         p.top_k,  p.top_p, p.seed,   std::max(0, p.logprobs),
                         processed};
  };
  // Members of the group's affinity that share its prompt computation draw theirs from the same
  // row, each with its own parameters.
  int32_t row = 0;
  for (const ScheduledChunk& c : work.prefill) {
    if (!c.want_logits) continue;
    const int32_t pos = static_cast<int32_t>(c.group->prompt.size());
    for (const SequenceGroup* m : prompt_members(*c.group)) {
      if (!m->seqs.empty()) continue;
      for (int32_t i = 0; i < m->num_samples; ++i)
        batch.samples.push_back(request(row, *m, i, pos));
    }
    ++row;
  }
  for (const ScheduledDecode& d : work.decode)
    batch.samples.push_back(request(row++, *d.group, d.sibling, d.seq().length()));
  batch.sample_vocab = std::min(backend_.config().vocab_size, tokenizer_.vocab_size());
  batch.return_logits = static_cast<bool>(observer_);
  std::vector<PlannerSeq> planner_seqs;
  const int32_t bs = backend_.block_size();
  for (const ScheduledDecode& d : work.decode) {
    const Sequence& s = d.seq();
    const int32_t pos = s.length() - 1;
    batch.decode.tokens.push_back(s.tokens.back());
    batch.decode.positions.push_back(pos);
    batch.decode.slots.push_back(s.block_table[pos / bs] * bs + pos % bs);
    planner_seqs.push_back(PlannerSeq{s.block_table, s.length()});
  }
  batch.decode.plan = planner_.plan(planner_seqs, &stats.cascade);
  stats.num_decode_seqs = batch.decode.size();
  return batch;
}

void Engine::fail_loads(const std::vector<KvTransfer>& transfers) {
  // Blocks loaded from the host tier were hashed when their groups were admitted; their KV is
  // undefined now. End every group holding one (a member admitted without a chunk this step
  // too), and forget every block's content.
  std::unordered_set<int32_t> loaded;
  for (const KvTransfer& t : transfers)
    if (t.kind == KvTransfer::Kind::kLoad) loaded.insert(t.block);
  auto holds = [&](const Sequence& s) {
    return std::any_of(s.block_table.begin(), s.block_table.end(),
                       [&](int32_t b) { return loaded.contains(b); });
  };
  std::vector<uint64_t> ids;
  for (const auto& g : scheduler_.running()) {
    bool hit = g->prompt_seq && holds(*g->prompt_seq);
    for (const Sequence& s : g->seqs)
      hit = hit || holds(s);
    if (hit) ids.push_back(g->id);
  }
  for (uint64_t id : ids)
    scheduler_.abort(id);
  pool_.clear_hashes();
}

void Engine::fail_batch(const SchedulerOutput& work, const Status& status, StepResult& result) {
  // The batch's KV is undefined now: end every group that had work in it.
  std::vector<uint64_t> ids;
  for (const auto& c : work.prefill) {
    for (const SequenceGroup* m : prompt_members(*c.group))  // their prompt was in this batch
      ids.push_back(m->id);
  }
  for (const auto& d : work.decode)
    ids.push_back(d.group->id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint64_t id : ids)
    scheduler_.abort(id);
  result.error = "backend: " + status.message();
}

void Engine::emit(SequenceGroup& g, Sequence& s, GeneratedToken token, StepResult& result) {
  size_t safe = s.text.size();
  if (!s.finished()) {
    safe -= stop_holdback(s.text, g.params.stop);
    safe -= utf8_holdback(s.text, safe);
  }
  std::string delta;
  if (safe > s.num_text_emitted) {
    delta = s.text.substr(s.num_text_emitted, safe - s.num_text_emitted);
    s.num_text_emitted = safe;
  }
  result.outputs.push_back(SequenceOutput{g.id, s.sibling, std::move(delta), 1, s.finish,
                                          std::move(token), s.stop_reason});
}

void Engine::append_token(SequenceGroup& g, Sequence& s, SampledToken& sampled,
                          StepResult& result) {
  const int32_t token = sampled.token;
  GeneratedToken out{token, sampled.logprob, {}, {}};
  if (g.params.logprobs >= 0) out.top = std::move(sampled.top);
  // The token's text for the client: special tokens' only without skip_special_tokens.
  auto add_text = [&] {
    out.text =
        g.params.skip_special_tokens ? tokenizer_.decode(token) : tokenizer_.token_bytes(token);
    s.text += out.text;
  };
  // EOS (unless ignored) and the request's stop tokens end the sequence; the token is reported
  // (its id), adding no text, except a stop token's with include_stop_str, as vLLM keeps it.
  const auto& stops = g.params.stop_token_ids;
  auto generated = [&] { return s.length() - static_cast<int32_t>(g.prompt.size()); };
  const bool eos = is_eos(token) && !g.params.ignore_eos;
  if (eos || std::find(stops.begin(), stops.end(), token) != stops.end()) {
    if (!eos && g.params.include_stop_str) add_text();
    // stop_reason as vLLM's: null for the tokenizer's EOS; the id of a stop token, and of the
    // model's own end ids (generation_config.json), which vLLM adds to the stop tokens.
    if (!(eos && tokenizer_.is_eos(token))) s.stop_reason.token = token;
    scheduler_.finish(g, s.sibling, FinishReason::kStop, generated() + 1);  // + the stop token
    return emit(g, s, std::move(out), result);
  }
  s.tokens.push_back(token);
  hash_token(s, token);
  const size_t before = s.text.size();
  add_text();
  // A stop string may end inside the new bytes: search from where it could start.
  for (const std::string& stop : g.params.stop) {
    if (stop.empty()) continue;
    const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
    const size_t at = s.text.find(stop, from);
    if (at != std::string::npos) {
      s.text.resize(g.params.include_stop_str ? at + stop.size() : at);
      s.stop_reason.text = stop;
      scheduler_.finish(g, s.sibling, FinishReason::kStop, generated());
      return emit(g, s, std::move(out), result);
    }
  }
  if (generated() >= g.params.max_tokens) {
    scheduler_.finish(g, s.sibling, FinishReason::kLength, generated());
  }
  emit(g, s, std::move(out), result);
}

StepResult Engine::step() {
  StepResult result;
  const Clock::TimePoint start = clock_.now();
  SchedulerOutput work = scheduler_.schedule(start);
  StepStats& stats = result.stats;
  stats.schedule = clock_.now() - start;
  stats.admitted = work.admitted;
  stats.preempted = work.preempted;
  stats.prefix_cache_query_tokens = work.prefix_cache_query_tokens;
  stats.prefix_cache_hit_tokens = work.prefix_cache_hit_tokens;
  if (work.empty()) {
    carried_moves_.insert(carried_moves_.end(), work.kv_moves.begin(), work.kv_moves.end());
  } else {
    const Clock::TimePoint built_from = clock_.now();
    const ForwardBatch batch = build_batch(work, stats);
    const Clock::TimePoint forward_from = clock_.now();
    stats.build = forward_from - built_from;
    const Status forwarded = backend_.forward(batch, out_);
    stats.forward = clock_.now() - forward_from;
    if (Status s = forwarded; !s.ok()) {
      fail_batch(work, s, result);
      // build_batch counted the moves: only the tier's make the cache's content uncertain.
      if (stats.num_host_loads + stats.num_host_offloads > 0) fail_loads(batch.kv_moves);
      result.finished = scheduler_.take_finished();
      return result;
    }
    assert(out_.samples.size() == batch.samples.size());
    const int32_t vocab = backend_.config().vocab_size;
    auto observe = [&](uint64_t group, int32_t sibling, int32_t position, int32_t r) {
      if (!observer_) return;
      observer_(group, sibling, position,
                std::span<const float>(out_.logits.data() + static_cast<size_t>(r) * vocab,
                                       batch.sample_vocab));
    };
    size_t k = 0;  // next sampled token
    for (const ScheduledChunk& c : work.prefill) {
      scheduler_.complete_chunk(c);
      SequenceGroup& leader = *c.group;
      const bool prompt_done =
          c.sibling < 0 && leader.prompt_seq->num_computed == leader.prompt_seq->length();
      if (!prompt_done) continue;
      // The group and every member sharing its prompt fork now, in build_batch's order.
      for (SequenceGroup* m : prompt_members(leader)) {
        SequenceGroup& g = *m;
        std::vector<int32_t> first;
        const size_t first_sample = k;
        if (c.want_logits && g.seqs.empty()) {
          for (int32_t i = 0; i < g.num_samples; ++i, ++k) {
            const SampleRequest& req = batch.samples[k];
            observe(g.id, i, req.position, req.logits_row);
            first.push_back(out_.samples[k].token);
          }
        }
        scheduler_.fork_siblings(g, first);
        for (size_t i = 0; i < first.size(); ++i)
          append_token(g, g.seqs[i], out_.samples[first_sample + i], result);
      }
    }
    for (const ScheduledDecode& d : work.decode) {
      scheduler_.complete_decode(d);
      Sequence& s = d.seq();
      const SampleRequest& req = batch.samples[k];
      observe(d.group->id, s.sibling, req.position, req.logits_row);
      append_token(*d.group, s, out_.samples[k++], result);
    }
    assert(k == batch.samples.size());
  }
  result.finished = scheduler_.take_finished();
  stats.duration = clock_.now() - start;
  return result;
}

}  // namespace kvc
