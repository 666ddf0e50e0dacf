// What a replica runs on, built from BackendOptions: its tokenizer (bytes, or a Hugging Face
// folder), the model's chat template, and its backend (CPU, sim, or CUDA through a maker that
// only kvcascade-cuda links in, so that nothing else needs the CUDA libraries).
#pragma once

#include <memory>

#include "api/chat_template.h"
#include "base/clock.h"
#include "base/status.h"
#include "replica/backend/backend.h"
#include "replica/backend/backend_options.h"
#include "replica/core/engine.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc {

// The CUDA backend's maker (replica/backend/cuda/cuda_backend.h: make_cuda_backend), for the
// model's vocabulary grown to at least `min_vocab`.
using CudaBackendMaker = Result<std::unique_ptr<Backend>> (*)(const BackendOptions& options,
                                                              int32_t min_vocab);

// Options that the chosen backend does not read are refused, with the option named.
Status check_backend_options(const BackendOptions& options);
// What check_backend_options cannot see without the model: that --tensor-parallel-size divides
// the model's heads, KV heads and intermediate size (reads the preset, or the folder's
// config.json and tensor headers). For --check-config; make_backend checks it too.
Status check_backend_model(const BackendOptions& options);

// --tokenizer DIR, else the tokenizer.json next to the model's weights, else the byte tokenizer.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const BackendOptions& options);

// The chat template of a Hugging Face tokenizer's tokenizer_config.json; null when it has none
// (or the tokenizer is the byte tokenizer): chat requests then render canonically.
Result<std::shared_ptr<const ChatTemplate>> make_chat_template(const Tokenizer& tokenizer);

// The options' backend for their model (random-initialised preset or loaded weights), or the sim
// backend (the sim preset, waiting on `clock`). A preset's vocabulary grows to `tokenizer`'s
// (random weights for a real tokenizer); loaded weights must cover it. `cuda` is null in a
// binary without the CUDA backend: --backend cuda is then an error.
Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options,
                                              const Tokenizer& tokenizer,
                                              CudaBackendMaker cuda = nullptr,
                                              Clock& clock = SteadyClock::instance());

// A line for the operator when the model's generation_config.json sets defaults the sampler does
// not implement (e.g. repetition_penalty): they are not applied. Empty when there are none.
std::string generation_config_note(const ModelConfig& model);

// `config` with what the backend decides: the longest sequence (the model's positions) and the
// cascade planner's merge cost per member (its partials: O in fp32 + LSE, written, read back and
// merged, per layer).
EngineConfig fit_engine_config(EngineConfig config, const Backend& backend);

}  // namespace kvc
