#!/usr/bin/env bash
# The fuzzing campaign (`make fuzz`): builds fuzz/ with clang-14 + libFuzzer + ASan/UBSan into
# $FUZZ_BUILD (CUDA off), then runs each target for $FUZZ_SECONDS, one after another, one job.
# New inputs go to $FUZZ_BUILD/corpus/<name>/ (fuzz/corpus/<name>/ is read as the seed); with
# FUZZ_MERGE=1 the union is then minimised (-merge=1) back into fuzz/corpus/<name>/. Crashes land
# in $FUZZ_BUILD/artifacts/<name>/; logs in $FUZZ_BUILD/logs/<name>.log (the last line has cov/ft).
#   scripts/fuzz.sh [target...]     (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-600}
FUZZ_RSS_MB=${FUZZ_RSS_MB:-2048}
FUZZ_MERGE=${FUZZ_MERGE:-1}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}  # build parallelism; the fuzzing itself is one job

# Inputs longer than this are not generated: long enough for several fields or messages, short
# enough to keep executions fast.
declare -A MAX_LEN=(
  [openai_request]=4096 [chat_render]=4096 [kv_event]=4096 [sse]=4096
  [http_session]=8192 [safetensors]=4096 [model_config]=2048 [radix_index]=2048
  [chat_template]=4096 [hf_tokenizer]=4096
)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(openai_request chat_render kv_event sse http_session
                                       safetensors model_config radix_index chat_template hf_tokenizer)

# libFuzzer comes with clang; installed here (not by install-deps.sh: only the campaign needs it).
if ! command -v clang++-14 >/dev/null; then
  apt-get install -y -qq clang-14 >/dev/null || {
    apt-get update -qq && apt-get install -y -qq clang-14 >/dev/null
  }
fi
cmake -S . -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DKVCASCADE_FUZZ=ON -DKVCASCADE_CUDA=OFF -DKVCASCADE_BENCH=OFF \
  >/dev/null
cmake --build "$FUZZ_BUILD" -j "$FUZZ_JOBS" --target $(printf 'fuzz_%s ' "${targets[@]}")

for t in "${targets[@]}"; do
  work="$FUZZ_BUILD/corpus/$t" artifacts="$FUZZ_BUILD/artifacts/$t/" log="$FUZZ_BUILD/logs/$t.log"
  mkdir -p "$work" "$artifacts" "fuzz/corpus/$t" "$(dirname "$log")"
  echo "== $t: ${FUZZ_SECONDS}s, max_len ${MAX_LEN[$t]}, log $log"
  rc=0
  "$FUZZ_BUILD/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" -max_total_time="$FUZZ_SECONDS" \
    -max_len="${MAX_LEN[$t]}" -rss_limit_mb="$FUZZ_RSS_MB" -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$artifacts" >"$log" 2>&1 || rc=$?
  grep -E '^#[0-9]+ +DONE|^stat::' "$log" || true
  if [ $rc -ne 0 ]; then
    echo "   $t FAILED (exit $rc): see $log and $artifacts"
    continue
  fi
  if [ "$FUZZ_MERGE" = 1 ]; then
    merged="$FUZZ_BUILD/merged/$t"
    rm -rf "$merged" && mkdir -p "$merged"
    # -use_counters=0: keep one input per covered edge (not per hit-count bucket), so that the
    # committed corpus stays at a few hundred small files; the full one stays in $work.
    "$FUZZ_BUILD/fuzz/fuzz_$t" -merge=1 -use_counters=0 -max_len="${MAX_LEN[$t]}" "$merged" \
      "fuzz/corpus/$t" "$work" \
      >"$FUZZ_BUILD/logs/$t.merge.log" 2>&1
    rm -rf "fuzz/corpus/$t" && cp -r "$merged" "fuzz/corpus/$t"
    echo "   corpus: $(ls "fuzz/corpus/$t" | wc -l) files, $(du -sh "fuzz/corpus/$t" | cut -f1)"
  fi
done
