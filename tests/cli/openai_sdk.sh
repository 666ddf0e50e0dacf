#!/usr/bin/env bash
# A tiny CPU replica and a router started as processes, then the official OpenAI Node SDK against
# the router (openai_sdk_check.mjs). Exits 77 (skipped) without node or the fetched SDK.
set -euo pipefail
kvc=$1
here=$(cd "$(dirname "$0")" && pwd)
npm_dir=${KVCASCADE_NPM_CACHE:-$HOME/.cache/kvcascade/npm}
if ! command -v node >/dev/null || [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
  echo "skipped: node or the openai SDK (scripts/fetch-npm-refs.sh) missing"
  exit 77
fi
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$log"' EXIT
source "$here/fleet.sh"
start_replica_and_router "$log" --preset tiny
node "$here/openai_sdk_check.mjs" "http://127.0.0.1:$port" tiny "$npm_dir"
