#!/usr/bin/env bash
# run_python.sh SCRIPT ARGS...: runs a tests/deploy python3 script (standard library only), or skips
# (exit 77, ctest SKIP_RETURN_CODE) when python3 is not installed.
set -euo pipefail
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not found on PATH"
  exit 77
fi
exec python3 "$@"
