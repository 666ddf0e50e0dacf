// The step model a replica fits (replica/core/step_model.h) from the sim's step times, as the
// engine loop feeds it: what routers compare replicas by (api/step_model.h
// seconds_per_work_token) is trusted only where the fitted steps tell what the reference step
// costs.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "api/step_model.h"
#include "base/clock.h"
#include "replica/backend/sim/sim_backend.h"
#include "replica/core/step_model.h"
#include "replica/model/bandwidth_model.h"

namespace kvc {
namespace {

// One step on `p`: a prefill chunk of `chunk` tokens after `start` cached ones (none: 0) beside
// decode rows at the contexts given. The fit gets what EngineLoop gives it: the step's seconds,
// its prefill tokens, its decode rows and the GB of KV the decode rows read.
void add_step(StepModelFit& fit, const SimPreset& p, int64_t start, int64_t chunk,
              const std::vector<int64_t>& contexts) {
  const int kv_bytes = p.hardware.kv_bytes_per_element;
  const StepWork w = synthetic_step_work(p.model, start, chunk, contexts, kv_bytes);
  const int64_t decode_kv = decode_context_bytes(p.model, contexts, kv_bytes);
  fit.add(step_seconds(p.model, w, p.hardware), static_cast<double>(chunk),
          static_cast<double>(contexts.size()), static_cast<double>(decode_kv) * 1e-9);
}

// What the sim's reference step takes per token of work: a 256-token chunk beside 16 rows
// reading 0.25 GB of KV.
double reference_seconds_per_token(const SimPreset& p) {
  StepWork ref = prefill_chunk_work(p.model, 0, kReferencePrefillTokens, true,
                                    p.hardware.kv_bytes_per_element);
  ref.rows += kReferenceDecodeSeqs;
  ref.decode_rows = kReferenceDecodeSeqs;
  ref.logit_rows += kReferenceDecodeSeqs;
  ref.kv_bytes_read += static_cast<int64_t>(kReferenceKvGb * 1e9);
  return step_seconds(p.model, ref, p.hardware) / (kReferencePrefillTokens + kReferenceDecodeSeqs);
}

// A replica that prefilled one 29,440-token prompt (57 chunks of 512 tokens and one of 256) and
// then decoded its 882 tokens alone (the A10G Mooncake replay's starved replica, twenty-sixth
// session) has no measure of what 16 decode rows cost: every decode step has one row, so the
// step's fixed cost may as well be the row's. In the replay such fits put 14-30 ms on the row
// and none on the step, and the reference step at 3.6-5.6x a busy replica's of the same device;
// this one's comes out 2.3x the sim's. The reference step's leverage and error say so, and the
// figure is withheld. A replica that decoded 1-16 rows at a time beside prefill chunks gets its
// figure, within the routers' speed tolerance (25%) of what the sim's reference step costs.
TEST(SimStepFit, ALoneDecodeGivesNoFigureAndABusyReplicaAFairOne) {
  const SimPreset a10g = *sim_preset("a10g-llama3-8b");
  StepModelFit alone;
  constexpr int64_t kPrompt = 29440;
  for (int64_t start = 0; start < kPrompt; start += 512)  // 57 chunks of 512, then 256
    add_step(alone, a10g, start, std::min<int64_t>(512, kPrompt - start), {});
  for (int64_t t = 0; t < 882; ++t)
    add_step(alone, a10g, 0, 0, {kPrompt + t});
  const auto lone = alone.model();
  ASSERT_TRUE(lone.has_value());
  EXPECT_GT(lone->reference_leverage, 1e3);
  EXPECT_GT(lone->reference_error, kMaxReferenceError);
  EXPECT_FALSE(seconds_per_work_token(*lone).has_value());

  StepModelFit busy;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> rows(1, 16), context(200, 4000), chunk(64, 512);
  for (int64_t step = 0; step < 1500; ++step) {
    // 1-16 rows decoding at 200-4,000 tokens of context; every fifth step a prompt's chunk too.
    std::vector<int64_t> contexts(static_cast<size_t>(rows(rng)));
    for (int64_t& c : contexts)
      c = context(rng);
    add_step(busy, a10g, 0, step % 5 == 0 ? chunk(rng) : 0, contexts);
  }
  const auto model = busy.model();
  ASSERT_TRUE(model.has_value());
  EXPECT_LE(model->reference_error, kMaxReferenceError);
  const auto figure = seconds_per_work_token(*model);
  ASSERT_TRUE(figure.has_value());
  const double truth = reference_seconds_per_token(a10g);
  EXPECT_NEAR(*figure / truth, 1.0, 0.25) << *figure << " against " << truth;
  // What the lone replica's fit would have given: 2.3 times the truth.
  EXPECT_GT(lone->seconds(kReferencePrefillTokens, kReferenceDecodeSeqs, kReferenceKvGb) /
                (kReferencePrefillTokens + kReferenceDecodeSeqs) / truth,
            2.0);
}

// The steps a sim backend times without running them (Backend::predicted_steps), which its
// replica's fit starts from: on every preset a figure routers take (100 steps or more, the
// reference step's error within bounds), so a fleet knows its A10Gs from its H200s from the first
// request. A line through the roofline's bend (a short prefill chunk reads the weights, a long
// one computes) puts the reference step 15% high on the H200 and 26% on the A10G; what routers
// compare is the ratio of two figures, within 10% of the sims' own.
TEST(SimStepFit, ThePredictedStepsGiveEachPresetsFigureBeforeItsFirstStep) {
  double h200_figure = 0, a10g_figure = 0, h200_truth = 0, a10g_truth = 0;
  for (const std::string name : {"h200-llama3-8b", "a10g-llama3-8b", "cpu-llama3-8b"}) {
    SimPreset preset = *sim_preset(name);
    const int32_t blocks = sim_kv_blocks(preset, 0.9, 16);
    const SimBackend sim(preset, blocks, 16, SteadyClock::instance());
    const std::vector<PredictedStep> steps = sim.predicted_steps();
    EXPECT_GE(steps.size(), 100u) << name;
    StepModelFit fit;
    for (const PredictedStep& s : steps) {
      EXPECT_GT(s.seconds, 0.0) << name;
      fit.add(s.seconds, s.prefill_tokens, s.decode_seqs, s.kv_gb);
    }
    const auto model = fit.published();
    ASSERT_TRUE(model.has_value()) << name;
    const auto figure = seconds_per_work_token(*model);
    ASSERT_TRUE(figure.has_value()) << name << ": error " << model->reference_error;
    const double truth = reference_seconds_per_token(preset);
    EXPECT_NEAR(*figure / truth, 1.0, 0.3) << name;
    if (name == "h200-llama3-8b") h200_figure = *figure, h200_truth = truth;
    if (name == "a10g-llama3-8b") a10g_figure = *figure, a10g_truth = truth;
  }
  // 600 GB/s and 125 TFLOP/s against 4.55 TB/s and 650: about five times as slow.
  EXPECT_GT(a10g_figure / h200_figure, 4.0);
  EXPECT_LT(a10g_figure / h200_figure, 7.0);
  EXPECT_NEAR((a10g_figure / h200_figure) / (a10g_truth / h200_truth), 1.0, 0.1);
}

// The leverage and the error travel with the model (GET /v1/load's "step_model"): a router reads
// them back; an older replica's model without them is taken as before; an error that is not a
// finite non-negative number, or over kMaxReferenceError, withholds the figure.
TEST(SimStepFit, ReferenceFiguresTravelInTheLoadReport) {
  StepModel m{0.03, 1.5e-4, 1e-4, 1.6e-3, 500};
  m.reference_leverage = 4250;
  m.reference_error = 0.04;
  auto back = read_step_model(step_model_json(m));
  ASSERT_TRUE(back.has_value());
  EXPECT_DOUBLE_EQ(back->reference_leverage, 4250);
  EXPECT_DOUBLE_EQ(back->reference_error, 0.04);
  EXPECT_TRUE(seconds_per_work_token(*back).has_value());
  nlohmann::json j = step_model_json(m);
  j.erase("reference_leverage");
  j.erase("reference_error");
  back = read_step_model(j);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->reference_leverage, 0);
  EXPECT_EQ(back->reference_error, 0);
  EXPECT_TRUE(seconds_per_work_token(*back).has_value());
  for (const nlohmann::json& bad :
       {nlohmann::json(nullptr), nlohmann::json(-1.0), nlohmann::json("7"),
        nlohmann::json(kMaxReferenceError * 1.01)}) {
    j["reference_error"] = bad;
    back = read_step_model(j);
    ASSERT_TRUE(back.has_value()) << bad;
    EXPECT_FALSE(seconds_per_work_token(*back).has_value()) << bad;
  }
}

}  // namespace
}  // namespace kvc
