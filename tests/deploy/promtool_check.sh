#!/usr/bin/env bash
# promtool_check.sh PROMETHEUS_YML: promtool accepts the demo's Prometheus config (and its file_sd
# targets). Exit 77 (ctest SKIP_RETURN_CODE) when promtool is missing.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not found on PATH (Debian package: prometheus)"
  exit 77
fi
promtool check config "$1"
