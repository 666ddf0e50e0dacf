#!/usr/bin/env bash
# The folder layering of docs/architecture.md, checked on every #include of the project's own
# headers (run by `make test` as the ctest `layering`). Prints each include that crosses a layer
# and exits 1 if there is any.
#   prefix_index, kernels: nothing of ours beyond themselves
#   http: prefix_index;  metrics: prefix_index;  router: http, metrics, prefix_index
#   replica: prefix_index, kernels (not kernels/cuda), http, metrics
#   replica/cuda (the CUDA backend): replica, kernels (CUDA-free headers of kernels/cuda too)
#   cli: anything but bench/ and kernels/cuda; bench, tests, fuzz: anything
#   CUDA's own headers (<cuda*.h>, <cublas*>): only kernels/cuda, bench, tests
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
status=0

allowed() {  # folder of the including file -> allowed top-level folders (space separated)
  case "$1" in
    prefix_index) echo "prefix_index" ;;
    kernels | kernels/cpu | kernels/cuda) echo "kernels" ;;
    http) echo "http prefix_index" ;;
    metrics) echo "metrics prefix_index" ;;
    router) echo "router http metrics prefix_index" ;;
    replica) echo "replica prefix_index kernels http metrics" ;;
    replica/cuda) echo "replica prefix_index kernels" ;;
    cli) echo "cli replica router http metrics prefix_index kernels" ;;
    *) echo "*" ;;
  esac
}

while IFS= read -r file; do
  dir=$(dirname "$file")
  ok=$(allowed "$dir")
  while IFS=: read -r line inc; do
    [ -z "$line" ] && continue
    target=${inc#*\"}
    target=${target%%\"*}
    top=${target%%/*}
    bad=""
    if [ "$ok" != "*" ]; then
      case " $ok " in *" $top "*) ;; *) bad="$top/ is above or beside $dir/" ;; esac
      # Only the CUDA backend (and kernels/cuda itself) includes kernels/cuda.
      if [[ "$target" == kernels/cuda/* && "$dir" != kernels/cuda && "$dir" != replica/cuda ]]; then
        bad="only replica/cuda includes kernels/cuda"
      fi
    fi
    if [ -n "$bad" ]; then
      echo "$file:$line: #include \"$target\": $bad"
      status=1
    fi
  done < <(grep -n '^#include "' "$file" | sed 's/^\([0-9]*\):/\1:/')
  case "$dir" in
    kernels/cuda | bench | tests* | fuzz) ;;
    *)
      if grep -nE '^#include <(cuda|cublas|cuda_runtime|cub/|thrust/)' "$file" >/dev/null; then
        echo "$file: includes a CUDA header outside kernels/cuda"
        status=1
      fi
      ;;
  esac
done < <({ git ls-files '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null ||
  find prefix_index kernels http metrics router replica cli -name '*.h' -o -name '*.cc' \
    -o -name '*.cu' -o -name '*.cuh'; } | grep -vE '^(tests|bench|fuzz)/')

[ $status -eq 0 ] && echo "layering: every #include respects docs/architecture.md's folder table"
exit $status
