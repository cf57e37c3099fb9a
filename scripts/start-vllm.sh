#!/usr/bin/env bash
# Starts one CPU vLLM engine in the background and waits until it serves, for tests and CI.
#
#   scripts/start-vllm.sh --model DIR --port HTTP_PORT --kv-port ZMQ_PORT \
#       [--replay-port ZMQ_PORT] [--num-gpu-blocks N] [--run-dir DIR] [--host ADDR] \
#       [--kv-connect] [--timeout SECONDS] [-- EXTRA_VLLM_ARGS...]
#
# Every option can also come from the environment: VLLM_MODEL, VLLM_PORT, VLLM_KV_PORT,
# VLLM_REPLAY_PORT, VLLM_NUM_GPU_BLOCKS, VLLM_RUN_DIR (default .tools/run), VLLM_HOST (default
# 127.0.0.1), VLLM_START_TIMEOUT (default 300: start-up takes ~20 s on an idle 2-core machine and
# up to ~2 min while builds run beside it). VLLM_CPU_KVCACHE_SPACE (GiB of KV, default 1) is
# passed through.
#
# The engine runs from .tools/vllm (scripts/install-vllm.sh) with flags that work on CPU: float32,
# eager mode, 2048-token context, 8 sequences, prefix caching with 32-token blocks (the CPU
# attention backend refuses 16), cached-token counts in usage, and KV events published on
# tcp://*:ZMQ_PORT with topic "kv-events" (plus a replay ROUTER socket when --replay-port is
# given). --num-gpu-blocks caps the KV pool (e.g. 72 blocks) so tests can force evictions.
# --kv-connect gives the publisher the concrete endpoint tcp://127.0.0.1:ZMQ_PORT instead, which
# vLLM connects to rather than binds: the subscriber must bind it. Arguments after -- go to vLLM
# last (a later --block-size wins over the one here).
# VLLM_SERVER_DEV_MODE=1 enables POST /reset_prefix_cache.
#
# Writes RUN_DIR/vllm-HTTP_PORT.pid (the engine's process group id) and RUN_DIR/vllm-HTTP_PORT.log,
# then polls GET /health until it answers 200. On timeout or early exit it prints the log's tail,
# stops what it started and exits 1. Stop an engine with scripts/stop-vllm.sh RUN_DIR/vllm-PORT.pid.
set -euo pipefail
# No cd: relative --model and --run-dir paths are the caller's.
ROOT=$(cd "$(dirname "$0")/.." && pwd)

PY="$ROOT/.tools/vllm/bin/python"
MODEL="${VLLM_MODEL:-}"
PORT="${VLLM_PORT:-}"
KV_PORT="${VLLM_KV_PORT:-}"
REPLAY_PORT="${VLLM_REPLAY_PORT:-}"
NUM_BLOCKS="${VLLM_NUM_GPU_BLOCKS:-}"
RUN_DIR="${VLLM_RUN_DIR:-$ROOT/.tools/run}"
HOST="${VLLM_HOST:-127.0.0.1}"
TIMEOUT="${VLLM_START_TIMEOUT:-300}"
KV_CONNECT=""
EXTRA=()

die() {
  echo "start-vllm: $*" >&2
  exit 1
}

need_value() {
  [ "$#" -ge 2 ] || die "$1 needs a value"
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --model) need_value "$@"; MODEL="$2"; shift 2 ;;
    --port) need_value "$@"; PORT="$2"; shift 2 ;;
    --kv-port) need_value "$@"; KV_PORT="$2"; shift 2 ;;
    --replay-port) need_value "$@"; REPLAY_PORT="$2"; shift 2 ;;
    --num-gpu-blocks) need_value "$@"; NUM_BLOCKS="$2"; shift 2 ;;
    --run-dir) need_value "$@"; RUN_DIR="$2"; shift 2 ;;
    --host) need_value "$@"; HOST="$2"; shift 2 ;;
    --timeout) need_value "$@"; TIMEOUT="$2"; shift 2 ;;
    --kv-connect) KV_CONNECT=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

is_port() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]
}

[ -n "$MODEL" ] || die "--model DIR (or VLLM_MODEL) is required; make one with scripts/make-tiny-model.py"
[ -f "$MODEL/config.json" ] || die "$MODEL has no config.json; is it a model directory?"
is_port "$PORT" || die "--port (or VLLM_PORT) must be a port number, got '$PORT'"
is_port "$KV_PORT" || die "--kv-port (or VLLM_KV_PORT) must be a port number, got '$KV_PORT'"
[ -z "$REPLAY_PORT" ] || is_port "$REPLAY_PORT" || die "--replay-port must be a port number, got '$REPLAY_PORT'"
[ -z "$NUM_BLOCKS" ] || [[ "$NUM_BLOCKS" =~ ^[1-9][0-9]*$ ]] || die "--num-gpu-blocks must be a positive integer, got '$NUM_BLOCKS'"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a whole number of seconds, got '$TIMEOUT'"
[ -x "$PY" ] || die "no vLLM venv at .tools/vllm; run scripts/install-vllm.sh first"
command -v curl >/dev/null 2>&1 || die "curl is needed to poll the engine's /health"
command -v setsid >/dev/null 2>&1 || die "setsid (util-linux) is needed to run the engine in its own process group"

MODEL=$(cd "$MODEL" && pwd)
mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
PID_FILE="$RUN_DIR/vllm-$PORT.pid"
LOG_FILE="$RUN_DIR/vllm-$PORT.log"

# Alive: signalable and not a zombie (a killed engine whose parent has not reaped it yet).
alive() {
  kill -0 "$1" 2>/dev/null && ! ps -o stat= -p "$1" 2>/dev/null | grep -q '^Z'
}

if [ -f "$PID_FILE" ] && alive "$(cat "$PID_FILE")"; then
  die "an engine started here already runs on port $PORT (pid $(cat "$PID_FILE")); stop it with scripts/stop-vllm.sh $PID_FILE"
fi

KV_ENDPOINT="tcp://*:$KV_PORT"
if [ -n "$KV_CONNECT" ]; then
  KV_ENDPOINT="tcp://127.0.0.1:$KV_PORT"
fi
KV_EVENTS="{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"$KV_ENDPOINT\", \"topic\": \"kv-events\""
if [ -n "$REPLAY_PORT" ]; then
  KV_EVENTS="$KV_EVENTS, \"replay_endpoint\": \"tcp://*:$REPLAY_PORT\""
fi
KV_EVENTS="$KV_EVENTS}"

ARGS=(
  -m vllm.entrypoints.openai.api_server
  --model "$MODEL"
  --host "$HOST" --port "$PORT"
  --dtype float32
  --enforce-eager
  --max-model-len 2048
  --max-num-seqs 8
  --enable-prefix-caching
  --block-size 32
  --enable-prompt-tokens-details
  --kv-events-config "$KV_EVENTS"
)
if [ -n "$NUM_BLOCKS" ]; then
  ARGS+=(--num-gpu-blocks-override "$NUM_BLOCKS")
fi
ARGS+=("${EXTRA[@]}")

# setsid: the engine (and the engine-core process it forks) get their own process group, so
# stop-vllm.sh can end exactly them. The pid written is that group's id.
VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_SERVER_DEV_MODE=1 \
  setsid "$PY" "${ARGS[@]}" >"$LOG_FILE" 2>&1 </dev/null &
PID=$!
echo "$PID" >"$PID_FILE"

fail() {
  echo "start-vllm: $* (log: $LOG_FILE); last lines:" >&2
  tail -n 40 "$LOG_FILE" >&2 || true
  kill -TERM -- "-$PID" 2>/dev/null || true
  rm -f "$PID_FILE"
  exit 1
}

started=$SECONDS
while :; do
  if ! kill -0 "$PID" 2>/dev/null; then
    wait "$PID" 2>/dev/null && rc=0 || rc=$?
    fail "the engine exited with status $rc before serving"
  fi
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$HOST:$PORT/health" || true)
  if [ "$code" = "200" ]; then
    break
  fi
  if [ $((SECONDS - started)) -ge "$TIMEOUT" ]; then
    fail "no 200 from http://$HOST:$PORT/health within ${TIMEOUT}s"
  fi
  sleep 1
done
echo "start-vllm: pid $PID serving http://$HOST:$PORT (kv events $KV_ENDPOINT${REPLAY_PORT:+, replay tcp://*:$REPLAY_PORT}) after $((SECONDS - started))s; log $LOG_FILE"
