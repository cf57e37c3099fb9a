#!/usr/bin/env bash
# Router overhead through HTTP with instant simulated workers (no engine time).
#
# Builds and starts `router-tools/examples/overhead_target.rs` (instant SimWorkers + one router
# node with its OpenAI frontend on an in-process bus, loopback only), then measures with wrk,
# closed loop, a fixed number of connections:
#   (a) direct:  POST <worker 1>/v1/completions   (non-streaming, max_tokens 1, tiny prompt)
#   (b) bare:    POST <bare proxy>/v1/completions (same body, passed through as it is by a
#                bare reverse proxy in the same process with the router's HTTP client: the
#                floor any proxy pays here; BARE=0 leaves it out)
#   (c) router:  POST <router>/v1/completions     (same body; the router streams upstream)
# alternating (a), (b) and (c) REPEATS times, once with CONNECTIONS connections (throughput; the
# machine is saturated, so latency there is mostly queueing) and once with LAT_CONNECTIONS
# (added latency without queueing), and reports req/s, latency p50/p99, the overhead
# (router - direct) at p50 and p99 and the target's CPU time per request; then (d) the target
# process's RSS (VmRSS) sampled while at least MEM_REQUESTS requests go through the router
# (bounded by MEM_MAX_SECONDS).
#
# The load tool, the router and the workers share this machine's cores: the script prints
# the target process's CPU use and the machine's during each router run.
#
# Environment (defaults): CONNECTIONS=64 THREADS=2 LAT_CONNECTIONS=1 DURATION=20 WARMUP=5
#   REPEATS=3 MEM_REQUESTS=1000000 MEM_CHUNK=30 MEM_MAX_SECONDS=300 WORKERS=2 PORT=18080
#   BARE=1 BARE_PORT=PORT+10
#   TARGET_ARGS="" (extra arguments, e.g. --no-telemetry) SKIP_BUILD=0
#   CARGO_TARGET_DIR (default: <repo>/target)
# Usage: scripts/bench-http.sh
set -euo pipefail

CONNECTIONS=${CONNECTIONS:-64}
LAT_CONNECTIONS=${LAT_CONNECTIONS:-1}
THREADS=${THREADS:-2}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-5}
REPEATS=${REPEATS:-3}
MEM_REQUESTS=${MEM_REQUESTS:-1000000}
MEM_CHUNK=${MEM_CHUNK:-30}
MEM_MAX_SECONDS=${MEM_MAX_SECONDS:-300}
WORKERS=${WORKERS:-2}
PORT=${PORT:-18080}
BARE=${BARE:-1}
BARE_PORT=${BARE_PORT:-$((PORT + 10))}
TARGET_ARGS=${TARGET_ARGS:-}
SKIP_BUILD=${SKIP_BUILD:-0}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}
bin=$target_dir/release/examples/overhead_target

# --- the load tool -------------------------------------------------------------------------
if ! command -v wrk >/dev/null; then
    echo "installing wrk (Debian package)" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq wrk
fi

# --- build -----------------------------------------------------------------------------------
if [ "$SKIP_BUILD" != 1 ]; then
    (cd "$repo" && cargo build --release -p router-tools --example overhead_target)
fi

work=$(mktemp -d)
target_pid=""
cleanup() {
    if [ -n "$target_pid" ] && kill -0 "$target_pid" 2>/dev/null; then
        kill -TERM "$target_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$target_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$target_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# --- the target ------------------------------------------------------------------------------
if [ "$BARE" = 1 ]; then
    TARGET_ARGS="$TARGET_ARGS --bare-proxy 127.0.0.1:$BARE_PORT"
fi
# shellcheck disable=SC2086 # TARGET_ARGS is a list of words
"$bin" --workers "$WORKERS" --listen "127.0.0.1:$PORT" $TARGET_ARGS >"$work/target.out" 2>"$work/target.err" &
target_pid=$!
for _ in $(seq 600); do
    grep -qx ready "$work/target.out" && break
    kill -0 "$target_pid" 2>/dev/null || { cat "$work/target.err" >&2; exit 1; }
    sleep 0.1
done
grep -qx ready "$work/target.out" || { echo "the target did not get ready" >&2; exit 1; }
direct=$(awk '$1 == "worker" && $2 == 1 {print $3}' "$work/target.out")
router=$(awk '$1 == "router" {print $2}' "$work/target.out")
bare=$(awk '$1 == "bare" {print $2}' "$work/target.out")
sides="direct router"
[ -n "$bare" ] && sides="direct bare router"
echo "target pid $target_pid: router $router, worker 1 $direct ($WORKERS workers)${bare:+, bare proxy $bare}"

# --- wrk script: the POST body, and a machine-readable summary ---------------------------------
cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"sim","prompt":"hello world","max_tokens":1}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
    "errors=%d status_errors=%d\n",
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.timeout, e.status))
end
LUA

# One response of each, to check they answer 200 before loading them.
for url in "$direct" "$router" $bare; do
    code=$(curl -s -o "$work/one.json" -w '%{http_code}' -H 'content-type: application/json' \
        -d '{"model":"sim","prompt":"hello world","max_tokens":1}' "$url/v1/completions")
    [ "$code" = 200 ] || { echo "$url answered $code: $(cat "$work/one.json")" >&2; exit 1; }
done

clk=$(getconf CLK_TCK)
proc_ticks() { awk '{print $14 + $15}' "/proc/$target_pid/stat"; }
# busy and total jiffies of the whole machine
machine_ticks() { awk '$1 == "cpu" {print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$target_pid/status"; }
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

# run_wrk URL SECONDS [CONNECTIONS THREADS] -> the RESULT line
run_wrk() {
    local out
    out=$(wrk -t "${4:-$THREADS}" -c "${3:-$CONNECTIONS}" -d "${2}s" --timeout 5s \
        -s "$work/post.lua" "$1/v1/completions")
    grep '^RESULT' <<<"$out"
}

check() {
    local errors status
    errors=$(field errors "$1")
    status=$(field status_errors "$1")
    if [ "$errors" != 0 ] || [ "$status" != 0 ]; then
        echo "errors during the run: $1" >&2
        exit 1
    fi
}

# measure CONNECTIONS THREADS: REPEATS x (direct, bare, router), then min .. max of each figure
measure() {
    local conns=$1 threads=$2 results=() r side url p0 p1 mb0 mt0 mb1 mt1 line secs
    local target_cpu machine_cpu cpu_us
    echo
    echo "== wrk -t $threads -c $conns, ${DURATION}s per run, $REPEATS repeats" \
        "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
    for r in $(seq "$REPEATS"); do
        for side in $sides; do
            case $side in
                direct) url=$direct ;;
                bare) url=$bare ;;
                router) url=$router ;;
            esac
            p0=$(proc_ticks)
            read -r mb0 mt0 < <(machine_ticks)
            line=$(run_wrk "$url" "$DURATION" "$conns" "$threads")
            p1=$(proc_ticks)
            read -r mb1 mt1 < <(machine_ticks)
            check "$line"
            secs=$(awk -v d="$(field duration_us "$line")" 'BEGIN {print d / 1e6}')
            target_cpu=$(awk -v t=$((p1 - p0)) -v c="$clk" -v s="$secs" \
                'BEGIN {printf "%.2f", t / c / s}')
            machine_cpu=$(awk -v b=$((mb1 - mb0)) -v t=$((mt1 - mt0)) -v n="$(nproc)" \
                'BEGIN {printf "%.2f", n * b / t}')
            # CPU time of the target process (router + workers) per request
            cpu_us=$(awk -v c="$target_cpu" -v q="$(field rps "$line")" \
                'BEGIN {printf "%.1f", c / q * 1e6}')
            results+=("$side $r $line target_cores=$target_cpu machine_cores=$machine_cpu cpu_us=$cpu_us")
            printf '%-6s run %d: %8s req/s  p50 %6s us  p99 %6s us  target process %s cores' \
                "$side" "$r" "$(field rps "$line")" "$(field p50_us "$line")" \
                "$(field p99_us "$line")" "$target_cpu"
            printf ' (%s us CPU/request), machine %s of %s cores\n' \
                "$cpu_us" "$machine_cpu" "$(nproc)"
        done
    done
    echo "summary, -c $conns (min .. max over $REPEATS runs; overhead = router - direct within a repeat)"
    printf '%s\n' "${results[@]}" | awk '
        function upd(k, v) {
            if (!(k in lo) || v + 0 < lo[k] + 0) lo[k] = v
            if (!(k in hi) || v + 0 > hi[k] + 0) hi[k] = v
        }
        {
            side = $1; run = $2
            for (i = 3; i <= NF; i++) { split($i, kv, "="); val[side, run, kv[1]] = kv[2] }
            upd(side " req/s", val[side, run, "rps"]); upd(side " p50 us", val[side, run, "p50_us"])
            upd(side " p99 us", val[side, run, "p99_us"])
            upd(side " target cores", val[side, run, "target_cores"])
            upd(side " CPU us/req", val[side, run, "cpu_us"])
            runs[run] = 1
            if (side == "bare") bare = 1
        }
        END {
            for (r in runs) {
                upd("overhead p50 us", val["router", r, "p50_us"] - val["direct", r, "p50_us"])
                upd("overhead p99 us", val["router", r, "p99_us"] - val["direct", r, "p99_us"])
            }
            list = "direct req/s,router req/s,direct p50 us,router p50 us,overhead p50 us," \
                   "direct p99 us,router p99 us,overhead p99 us,direct target cores," \
                   "router target cores,direct CPU us/req,router CPU us/req"
            if (bare) list = list ",bare req/s,bare p50 us,bare p99 us,bare CPU us/req"
            n = split(list, keys, ",")
            for (i = 1; i <= n; i++) printf "  %-20s %10s .. %s\n", keys[i], lo[keys[i]], hi[keys[i]]
        }'
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
echo "warm-up: ${WARMUP}s each"
run_wrk "$direct" "$WARMUP" >/dev/null
run_wrk "$router" "$WARMUP" >/dev/null
[ -n "$bare" ] && run_wrk "$bare" "$WARMUP" >/dev/null

# throughput: enough connections to saturate the machine (latency here is mostly queueing)
measure "$CONNECTIONS" "$THREADS"
# added latency without queueing: one connection, one request at a time
measure "$LAT_CONNECTIONS" 1

# --- memory: RSS over a long run through the router ---------------------------------------------
echo
echo "memory: the target process's VmRSS while >= $MEM_REQUESTS requests go through the router"
echo "(chunks of ${MEM_CHUNK}s, at most ${MEM_MAX_SECONDS}s)"
total=0
elapsed=0
rss0=$(rss_kib)
echo "  before: ${rss0} KiB"
while [ "$total" -lt "$MEM_REQUESTS" ] && [ "$elapsed" -lt "$MEM_MAX_SECONDS" ]; do
    line=$(run_wrk "$router" "$MEM_CHUNK")
    check "$line"
    total=$((total + $(field requests "$line")))
    elapsed=$((elapsed + MEM_CHUNK))
    echo "  after ${total} requests (${elapsed}s): $(rss_kib) KiB ($(field rps "$line") req/s)"
done
sleep 2
rss1=$(rss_kib)
echo "  idle after the run: ${rss1} KiB; change $((rss1 - rss0)) KiB over $total requests"
