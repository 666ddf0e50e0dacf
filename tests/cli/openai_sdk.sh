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
port_of() {  # waits for "http://127.0.0.1:PORT" in a log file
  for _ in $(seq 200); do
    p=$(grep -o 'http://127.0.0.1:[0-9]*' "$1" | head -1 | sed 's/.*://') || true
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "no port in $1" >&2; cat "$1" >&2; exit 1
}
"$kvc" replica --preset tiny --port 0 --host 127.0.0.1 >"$log/replica" 2>&1 &
rport=$(port_of "$log/replica")
"$kvc" router --port 0 --host 127.0.0.1 --replica "127.0.0.1:$rport" >"$log/router" 2>&1 &
port=$(port_of "$log/router")
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
node "$here/openai_sdk_check.mjs" "http://127.0.0.1:$port" tiny "$npm_dir"
