# Sourced by the CLI tests that start a replica and a router as processes ($kvc: the binary).

# port_of LOG: waits (bounded) for "http://127.0.0.1:PORT" in a log file and prints PORT.
port_of() {
  for _ in $(seq 200); do
    p=$(grep -o 'http://127.0.0.1:[0-9]*' "$1" | head -1 | sed 's/.*://') || true
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "no port in $1" >&2; cat "$1" >&2; exit 1
}

# start_replica_and_router DIR REPLICA_ARGS...: a replica with those arguments (DIR/replica.log)
# and a router in front of it (DIR/router.log), on free ports of 127.0.0.1; sets $port to the
# router's and waits (bounded) until it is ready. The caller's EXIT trap stops them.
start_replica_and_router() {
  local dir=$1 rport
  shift
  "$kvc" replica "$@" --port 0 --host 127.0.0.1 >"$dir/replica.log" 2>&1 &
  rport=$(port_of "$dir/replica.log")
  "$kvc" router --port 0 --host 127.0.0.1 --replica "127.0.0.1:$rport" >"$dir/router.log" 2>&1 &
  port=$(port_of "$dir/router.log")
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
}
