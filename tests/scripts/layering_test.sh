#!/usr/bin/env bash
# scripts/check-layering.sh must fail a wrong #include in every folder (and pass a right one), so
# the ctest `layering` cannot pass by checking nothing. Each case writes one file into a scratch
# tree and checks it alone.
#   layering_test.sh CHECKER
set -u
checker=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

# expect WANT FOLDER INCLUDE-LINE: WANT is "fail" or "pass".
expect() {
  local want=$1 folder=$2 line=$3 out rc
  mkdir -p "$scratch/$folder"
  printf '%s\n' "$line" >"$scratch/$folder/case.h"
  out=$(bash "$checker" "$scratch" "$folder/case.h" 2>&1)
  rc=$?
  if [ "$want" = fail ] && { [ $rc -ne 1 ] || ! grep -q "$folder/case.h" <<<"$out"; }; then
    echo "FAIL: $folder/: '$line' was not refused (exit $rc): $out"
    failures=$((failures + 1))
  elif [ "$want" = pass ] && [ $rc -ne 0 ]; then
    echo "FAIL: $folder/: '$line' was refused: $out"
    failures=$((failures + 1))
  fi
  rm -f "$scratch/$folder/case.h"
}

# One wrong include per folder: upward, sideways, into cli/ or tests/, or a CUDA header.
while IFS='|' read -r folder bad; do
  [ -z "$folder" ] && continue
  expect fail "$folder" "#include $bad"
  expect pass "$folder" "#include \"$folder/other.h\""
  [[ "$folder" == fuzz ]] || expect pass "$folder" '#include "base/status.h"'
done <<'CASES'
base|"api/openai_request.h"
api|"prefix_index/block_hash.h"
prefix_index|"api/openai_request.h"
http|"prefix_index/block_hash.h"
metrics|"http/server.h"
kernels|"replica/core/engine.h"
kernels/cpu|"kernels/cuda/device.h"
kernels/cuda|"replica/model/model_config.h"
router/policy|"router/fleet/replica_pool.h"
router/fleet|"router/proxy.h"
router|"replica/core/engine.h"
replica/model|"replica/tokenizer/tokenizer.h"
replica/tokenizer|"replica/model/model_config.h"
replica/backend|"replica/core/engine.h"
replica/backend/cpu|"replica/backend/sim/sim_backend.h"
replica/backend/sim|"replica/core/engine.h"
replica/backend/cuda|<cuda_runtime.h>
replica/core|"replica/server/replica_server.h"
replica/server|"replica/backend/cuda/cuda_backend.h"
bench|"kernels/cuda/device.h"
bench/cuda|"bench/loadgen.h"
cli|"tests/testing/fake_clock.h"
fuzz|"tests/kernels/kernel_test_util.h"
CASES
# Nothing includes cli/: not bench/, not the replica, not a test.
expect fail bench '#include "cli/commands.h"'
expect fail replica/server '#include "cli/engine_flags.h"'
expect fail tests/replica '#include "cli/engine_flags.h"'
# Rights that the arrows give: downward includes pass.
expect pass cli '#include "replica/backend/cuda/cuda_backend.h"'
expect pass bench '#include "bench/cuda/engine_bench.h"'
expect pass replica/backend/cuda '#include "kernels/cuda/llama.h"'
expect pass fuzz '#include "tests/testing/fake_clock.h"'

if [ $failures -ne 0 ]; then
  echo "layering_test: $failures case(s) failed"
  exit 1
fi
echo "layering_test: the check refuses a wrong include in each of 23 folders"
