#!/usr/bin/env bash
# CPU instructions per routed request, counted by valgrind's callgrind: the same target as
# scripts/bench-http.sh (router + two instant simulated workers in one process), loaded by wrk
# with CONNECTIONS connections. The count is of user-space instructions (the kernel's share,
# loopback TCP, is not in it) and, unlike CPU time, does not depend on how fast this VM's cores
# are today, so two builds can be compared across days: pass one target binary per build.
#
# Usage: scripts/bench-instructions.sh [TARGET_BINARY ...]
#   (default: <repo>/target/release/examples/overhead_target, built first)
# Environment (defaults): CONNECTIONS=32 WARMUP=10 DURATION=30 PORT=18081
#   BARE=0 (1: also count the target's bare reverse proxy, `--bare-proxy`, on PORT+10: what
#   passing the same request through with no router work costs, the floor under the router)
# Prints one line per binary (and per side with BARE=1): requests counted, instructions,
# instructions per request.
set -euo pipefail

CONNECTIONS=${CONNECTIONS:-32}
WARMUP=${WARMUP:-10}
DURATION=${DURATION:-30}
PORT=${PORT:-18081}
BARE=${BARE:-0}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

for tool in valgrind callgrind_control callgrind_annotate wrk; do
    if ! command -v "$tool" >/dev/null; then
        echo "installing valgrind and wrk (Debian packages)" >&2
        if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq valgrind wrk
        break
    fi
done

if [ $# -eq 0 ]; then
    (cd "$repo" && cargo build --release -p router-tools --example overhead_target)
    set -- "${CARGO_TARGET_DIR:-$repo/target}/release/examples/overhead_target"
fi

work=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"model":"sim","prompt":"hello world","max_tokens":1}'
wrk.headers["Content-Type"] = "application/json"
EOF
url="http://127.0.0.1:$PORT/v1/completions"

# count SIDE URL: zero the counters, load URL for DURATION, dump, print the count
count() {
    local side=$1 url=$2 requests dump total
    wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" -s "$work/post.lua" "$url" >/dev/null
    rm -f "$work/cg.$pid".*
    callgrind_control -z "$pid" >/dev/null 2>&1
    requests=$(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$work/post.lua" "$url" |
        awk '/requests in/ {print $1}')
    callgrind_control -d "$pid" >/dev/null 2>&1
    sleep 2
    dump=$(ls -t "$work/cg.$pid".* | head -1)
    total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    echo "$bin ($side): $requests requests, $total instructions, $((total / requests)) per request"
}

for bin in "$@"; do
    out="$work/target.out"
    extra=()
    if [ "$BARE" = 1 ]; then extra=(--bare-proxy "127.0.0.1:$((PORT + 10))"); fi
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
        "$bin" --workers 2 --listen "127.0.0.1:$PORT" "${extra[@]}" >"$out" 2>"$work/target.err" &
    for _ in $(seq 300); do
        grep -qx ready "$out" && break
        sleep 1
    done
    grep -qx ready "$out" || { cat "$work/target.err" >&2; exit 1; }
    pid=$(awk '$1 == "pid" {print $2}' "$out")
    count router "$url"
    if [ "$BARE" = 1 ]; then
        count bare "$(awk '$1 == "bare" {print $2}' "$out")/v1/completions"
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
    rm -f "$work"/cg.*
done
