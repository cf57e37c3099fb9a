#!/usr/bin/env bash
# Placement A/B through a real node: one `router-node serve` in front of N simulated engines
# (`worker --sim`) on a local nats-server, with the `[selection]` settings given, then
# `router-tools bench` with the arguments given. Fresh engines every run, so caches start
# cold; everything started is stopped at the end. The report is printed and kept, with the
# bench JSON and every process's log, in OUT (default out/bench-selection/NAME).
#
# Usage: scripts/bench-selection.sh NAME SELECTION_TOML [bench arguments...]
#   NAME            a label (the output directory's name)
#   SELECTION_TOML  lines for the node's [selection] section ("" for the defaults), e.g.
#                   $'prefill_load_scale = 1.0\noverlap_credit = 1.0\ncount_booked_prefix = false'
#
# Environment (defaults): WORKERS=4 SPEEDUP=10 (engine speed) KV_BLOCKS=131072 (per engine,
#   16-token blocks: 2M tokens) WORKER_ARGS="" (more `worker --sim` flags) OUT
#   ROUTER_NODE (default target/release/router-node, built if missing)
#   ROUTER_TOOLS (default target/release/router-tools, built if missing)
#   NATS_SERVER_BIN (default .tools/nats/bin/nats-server, installed if missing)
#
# Example (the conversation trace's first 1,500 requests at 10x, text prompts):
#   scripts/bench-selection.sh new "" --trace traces/conversation_trace.jsonl.gz \
#     --max-requests 1500 --speedup 10 --prompt-format text --warmup 4
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 2 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
NAME=$1
SELECTION=$2
shift 2
WORKERS=${WORKERS:-4}
SPEEDUP=${SPEEDUP:-10}
KV_BLOCKS=${KV_BLOCKS:-131072}
OUT=${OUT:-$ROOT/out/bench-selection/$NAME}
BIN=${ROUTER_NODE:-$ROOT/target/release/router-node}
TOOLS=${ROUTER_TOOLS:-$ROOT/target/release/router-tools}
NATS_BIN=${NATS_SERVER_BIN:-$ROOT/.tools/nats/bin/nats-server}

if [[ ! -x $BIN || ! -x $TOOLS ]]; then
  (cd "$ROOT" && cargo build --release -p router-node -p router-tools)
fi
if [[ ! -x $NATS_BIN ]]; then
  "$ROOT/scripts/install-nats.sh"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

rm -rf "$OUT"
mkdir -p "$OUT"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

NATS_PORT=$(free_port)
"$NATS_BIN" -a 127.0.0.1 -p "$NATS_PORT" >"$OUT/nats.log" 2>&1 &
PIDS+=($!)
NATS_URL=nats://127.0.0.1:$NATS_PORT
for _ in $(seq 50); do
  (echo >"/dev/tcp/127.0.0.1/$NATS_PORT") 2>/dev/null && break
  sleep 0.1
done

for i in $(seq 1 "$WORKERS"); do
  # shellcheck disable=SC2086 # WORKER_ARGS is a list of flags
  "$TOOLS" worker --sim --nats "$NATS_URL" --worker-id "$i" --listen "127.0.0.1:$(free_port)" \
    --speedup "$SPEEDUP" --kv-blocks "$KV_BLOCKS" ${WORKER_ARGS:-} >"$OUT/worker-$i.log" 2>&1 &
  PIDS+=($!)
done

HTTP_PORT=$(free_port)
ADMIN_PORT=$(free_port)
cat >"$OUT/node.toml" <<EOF
[http]
listen = "127.0.0.1:$HTTP_PORT"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[bus]
nats_url = "$NATS_URL"
[selection]
$SELECTION
EOF
"$BIN" serve --config "$OUT/node.toml" >"$OUT/node.log" 2>&1 &
PIDS+=($!)

# Ready once the node sees every engine.
ready=0
for _ in $(seq 300); do
  seen=$(curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" |
    awk '/^switchyard_registered_workers[{ ]/ { n += $NF } END { print n + 0 }' || echo 0)
  if curl -sf "http://127.0.0.1:$HTTP_PORT/ready" >/dev/null && [[ ${seen%.*} -ge $WORKERS ]]; then
    ready=1
    break
  fi
  sleep 0.2
done
if [[ $ready != 1 ]]; then
  echo "bench-selection: the node did not see $WORKERS engines in 60 s; logs in $OUT" >&2
  exit 1
fi

"$TOOLS" bench --url "http://127.0.0.1:$HTTP_PORT" --metrics-url "http://127.0.0.1:$ADMIN_PORT/metrics" \
  --json "$OUT/bench.json" "$@" | tee "$OUT/report.txt"
