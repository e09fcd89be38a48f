#!/usr/bin/env bash
# The quick start: a Dockyard server on the example config repo (examples/config-repo), on
# the local fleet of this machine. It waits for the task `hello` to run, prints its logs,
# then stops the service, the server and the local agent. Nothing outside a temp dir is
# touched (the CLI config goes there too). Keep the files with DEMO_KEEP=1; keep the server
# running (for the web console) until Ctrl-C with DEMO_HOLD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/dockyard-demo.XXXXXX")
export DOCKYARD_CONFIG="$work/cli-config.yml"
export DOCKYARD_DATA_DIR="$work/data"
dockyard=.venv/bin/dockyard
server_pid=""

cleanup() {
  set +e
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    "$dockyard" stop web -y >/dev/null 2>&1
    for _ in $(seq 1 50); do
      "$dockyard" ps -a --json 2>/dev/null | grep -q '"status": "running"' || break
      sleep 0.2
    done
    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  .venv/bin/python -c "import sys, pathlib; from agent.local import stop_local_agent; stop_local_agent(pathlib.Path(sys.argv[1]))" "$DOCKYARD_DATA_DIR" >/dev/null 2>&1
  if [ "${DEMO_KEEP:-0}" = 1 ]; then echo "demo files kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# A fresh config repo made from the example.
repo="$work/config-repo"
cp -r examples/config-repo "$repo"
git -C "$repo" init -q -b main
git -C "$repo" add -A
git -C "$repo" -c user.name=demo -c user.email=demo@localhost commit -q -m "example config repo"

port=$(.venv/bin/python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
echo "demo: starting dockyard server on 127.0.0.1:$port (data in $work)"
"$dockyard" server --repo "$repo" --branch main --port "$port" >"$work/server.log" 2>&1 &
server_pid=$!
echo "demo: web console at http://127.0.0.1:$port/ (sign in with the token in $DOCKYARD_DATA_DIR/admin-token)"

status=""
for _ in $(seq 1 300); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: the server stopped; its log:" >&2; tail -n 30 "$work/server.log" >&2; exit 1
  fi
  status=$("$dockyard" ps -a --json 2>/dev/null | .venv/bin/python -c '
import json, sys
runs = {r["run_spec"]["run_name"]: r for r in json.load(sys.stdin)["runs"]}
print(runs.get("hello", {}).get("status", ""))' 2>/dev/null || true)
  case "$status" in done|failed|terminated) break ;; esac
  sleep 0.5
done
echo "demo: task hello is ${status:-not started}"
"$dockyard" ps -a
echo "demo: dockyard logs hello"
"$dockyard" logs hello
if [ "${DEMO_HOLD:-0}" = 1 ] && [ "$status" = done ]; then
  echo "demo: the server keeps running for the web console at http://127.0.0.1:$port/; Ctrl-C stops it"
  trap 'cleanup; exit 0' INT TERM
  wait "$server_pid" || true
fi
[ "$status" = done ]
