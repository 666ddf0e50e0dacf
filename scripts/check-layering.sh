#!/usr/bin/env bash
# The folder layering of docs/architecture.md, checked on every #include of the project's own
# headers (run by `make test` as the ctest `layering`; tests/scripts/layering_test.sh proves it
# fails a wrong include in every folder). Arrows only go down:
#   cli -> bench -> router, replica/server -> ... -> api, prefix_index, http, kernels, metrics -> base
# Prints each include that crosses a layer and exits 1 if there is any.
#   check-layering.sh [ROOT [FILE...]]   FILEs (relative to ROOT): check only these
set -u
set -f  # the allowed lists hold "*" patterns: no globbing
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
shift || true
status=0

# The folders a file in folder $1 may include from, as "dir" (that folder's own files) or
# "dir/*" (the folder and everything below it). Folders not listed (tests, fuzz) may include
# anything; only tests and fuzz may include tests/testing/.
allowed() {
  case "$1" in
    base) echo "base" ;;
    api) echo "api base" ;;
    prefix_index) echo "prefix_index base" ;;
    http) echo "http base" ;;
    metrics) echo "metrics base" ;;
    kernels) echo "kernels base" ;;
    kernels/cpu) echo "kernels/cpu kernels base" ;;
    kernels/cuda) echo "kernels/cuda kernels/cpu kernels base" ;;
    router/policy) echo "router/policy prefix_index base" ;;
    router/fleet) echo "router/fleet router/policy api http prefix_index base" ;;
    router) echo "router/* api http metrics prefix_index base" ;;
    replica/model) echo "replica/model kernels/cpu kernels base" ;;
    replica/tokenizer) echo "replica/tokenizer base" ;;
    replica/backend) echo "replica/backend replica/model kernels/cpu kernels base" ;;
    replica/backend/cpu | replica/backend/sim)
      echo "$1 replica/backend replica/model kernels/cpu kernels base" ;;
    # The CUDA backend reaches kernels/cuda through its CUDA-free headers (llama.h, device.h).
    replica/backend/cuda)
      echo "replica/backend/cuda replica/backend replica/model kernels/cuda kernels/cpu kernels base" ;;
    replica/core)
      echo "replica/core replica/backend replica/tokenizer replica/model api prefix_index metrics kernels base" ;;
    replica/server)
      echo "replica/server replica/core replica/backend replica/backend/cpu replica/backend/sim" \
        "replica/tokenizer replica/model api http metrics prefix_index kernels base" ;;
    # bench/ reads the GPU benchmarks' option structs (bench/cuda/*.h, CUDA-free) and links none
    # of bench/cuda, replica/backend/cuda or kernels/cuda: kvcascade stays free of CUDA.
    bench)
      echo "bench bench/cuda router/* replica/server replica/core replica/backend" \
        "replica/backend/cpu replica/backend/sim replica/tokenizer replica/model api http" \
        "metrics prefix_index kernels/cpu kernels base" ;;
    bench/cuda)
      echo "bench/cuda replica/* router/* api http metrics prefix_index kernels/* kernels base" ;;
    cli) echo "cli bench bench/cuda router/* replica/* api http metrics prefix_index kernels/* kernels base" ;;
    *) echo "*" ;;
  esac
}

# Whether folder $2 is in the allowed list $1.
permits() {
  local entry
  for entry in $1; do
    case "$entry" in
      '*') return 0 ;;
      */'*') [[ "$2" == "${entry%/\*}" || "$2" == "${entry%/\*}"/* ]] && return 0 ;;
      *) [[ "$2" == "$entry" ]] && return 0 ;;
    esac
  done
  return 1
}

check_file() {
  local file=$1 dir ok line inc target tdir bad
  dir=$(dirname "$file")
  ok=$(allowed "$dir")
  while IFS=: read -r line inc; do
    [ -z "$line" ] && continue
    target=${inc#*\"}
    target=${target%%\"*}
    tdir=$(dirname "$target")
    bad=""
    if [[ "$target" == cli/* && "$dir" != cli ]]; then
      bad="nothing includes cli/"
    elif [[ "$target" == tests/* && "$dir" != tests* && "$dir" != fuzz ]]; then
      bad="only tests and fuzz targets include tests/"
    elif [[ "$target" == tests/* && "$dir" == fuzz && "$tdir" != tests/testing ]]; then
      bad="fuzz targets include tests/ only through tests/testing/"
    elif ! permits "$ok" "$tdir"; then
      bad="$tdir/ is above or beside $dir/"
    fi
    if [ -n "$bad" ]; then
      echo "$file:$line: #include \"$target\": $bad"
      status=1
    fi
  done < <(grep -n '^#include "' "$file")
  case "$dir" in
    kernels/cuda | bench/cuda | tests* | fuzz) ;;
    *)
      if grep -nE '^#include <(cuda|cublas|cuda_runtime|cub/|thrust/)' "$file" >/dev/null; then
        echo "$file: includes a CUDA header outside kernels/cuda and bench/cuda"
        status=1
      fi
      ;;
  esac
}

if [ $# -gt 0 ]; then
  for file in "$@"; do check_file "$file"; done
else
  while IFS= read -r file; do
    check_file "$file"
  done < <({ git ls-files '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null ||
    find base api prefix_index kernels http metrics router replica bench cli tests fuzz -name '*.h' \
      -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh'; })
fi

[ $status -eq 0 ] && echo "layering: every #include respects docs/architecture.md's folder table"
exit $status
