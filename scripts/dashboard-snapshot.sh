#!/usr/bin/env bash
# Renders the Grafana dashboard (deploy/grafana/switchyard.json) during a `router-tools bench`
# run, without containers: the compose fleet's shape started as plain processes.
#
#   nats-server, three simulated workers, two `serve` replicas behind HAProxy (roundrobin,
#   /ready checks), Prometheus (Debian's package) scraping both replicas' admin listeners
#   every 2 s, and
#   `router-tools bench` replaying the first minutes of traces/conversation_trace.jsonl.gz
#   through HAProxy in two classes. At the end every panel's queries run on that Prometheus
#   and scripts/render_dashboard.py draws them where the dashboard puts them.
#
# Usage: scripts/dashboard-snapshot.sh [OUT.png]   (default docs/img/dashboard.png)
# Env:   SNAPSHOT_REQUESTS (default 700), SNAPSHOT_SPEEDUP (default 2.5)
# Needs: cargo, apt-get (for prometheus when missing), network to PyPI (matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${1:-docs/img/dashboard.png}"
REQUESTS="${SNAPSHOT_REQUESTS:-700}"
SPEEDUP="${SNAPSHOT_SPEEDUP:-2.5}"

./scripts/install-nats.sh >/dev/null
./scripts/install-haproxy.sh >/dev/null
if ! command -v prometheus >/dev/null 2>&1; then
  echo "dashboard-snapshot: installing Debian's prometheus package"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null
fi
PY="$ROOT/.tools/dash/bin/python"
if ! "$PY" -c "import matplotlib" 2>/dev/null; then
  echo "dashboard-snapshot: installing matplotlib into .tools/dash"
  python3 -m venv "$ROOT/.tools/dash"
  "$PY" -m pip install --quiet 'matplotlib>=3.7,<4'
fi
cargo build --quiet -p router-node -p router-tools
BIN="$ROOT/target/debug/router-node"
TOOLS="$ROOT/target/debug/router-tools"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() {
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "$1"; then return 0; fi
    sleep 0.2
  done
  echo "dashboard-snapshot: $1 did not answer" >&2
  return 1
}

NATS_PORT=$(free_port)
"$ROOT/.tools/nats/bin/nats-server" -a 127.0.0.1 -p "$NATS_PORT" >"$WORK/nats.log" 2>&1 &
PIDS+=($!)
NATS="nats://127.0.0.1:$NATS_PORT"
sleep 0.5

cp deploy/compose/policy.toml "$WORK/policy.toml"
ROUTERS=()
ADMINS=()
for i in 1 2; do
  port=$(free_port)
  admin_port=$(free_port)
  cat >"$WORK/node-$i.toml" <<EOF
[node]
cluster = "snapshot"
topology = "aggregated"
block_size = 16
[http]
listen = "127.0.0.1:$port"
models = ["sim"]
[admin]
listen = "127.0.0.1:$admin_port"
[bus]
kind = "nats"
nats_url = "$NATS"
[policy]
path = "policy.toml"
[telemetry]
log_filter = "warn"
EOF
  "$BIN" serve --config "$WORK/node-$i.toml" >"$WORK/router-$i.log" 2>&1 &
  PIDS+=($!)
  ROUTERS+=("127.0.0.1:$port")
  ADMINS+=("127.0.0.1:$admin_port")
done
for i in 1 2 3; do
  port=$(free_port)
  "$TOOLS" worker --sim --role agg --worker-id "$i" --cluster snapshot --speedup 4 \
    --listen "127.0.0.1:$port" --advertise "http://127.0.0.1:$port" --nats "$NATS" \
    >"$WORK/worker-$i.log" 2>&1 &
  PIDS+=($!)
done
for r in "${ROUTERS[@]}"; do wait_http "http://$r/ready"; done

LB_PORT=$(free_port)
cat >"$WORK/haproxy.cfg" <<EOF
defaults
    mode http
    option redispatch
    retries 2
    timeout connect 2s
    timeout client 10m
    timeout server 10m
frontend openai
    bind 127.0.0.1:$LB_PORT
    default_backend routers
backend routers
    balance roundrobin
    option httpchk GET /ready
    default-server check inter 1s fall 2 rise 2
    server router-1 ${ROUTERS[0]}
    server router-2 ${ROUTERS[1]}
EOF
"$ROOT/.tools/haproxy/bin/haproxy" -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
PIDS+=($!)

PROM_PORT=$(free_port)
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
scrape_configs:
  - job_name: switchyard-router
    static_configs:
      - targets: ["${ADMINS[0]}", "${ADMINS[1]}"]   # each replica's admin listener
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready"
wait_http "http://127.0.0.1:$LB_PORT/ready"
sleep 10   # a few scrapes of the idle fleet before the load

STARTED=$(date +%s)
echo "dashboard-snapshot: bench, $REQUESTS requests at speedup $SPEEDUP through HAProxy"
"$TOOLS" bench --trace traces/conversation_trace.jsonl.gz --url "http://127.0.0.1:$LB_PORT" \
  --max-requests "$REQUESTS" --speedup "$SPEEDUP" --classes interactive=3,batch=1 \
  --max-output-tokens 128 | grep -v "^bench: sent"
sleep 6    # the last scrapes
MINUTES=$(python3 -c "print(($(date +%s) - $STARTED + 40) / 60)")

mkdir -p "$(dirname "$OUT")"
"$PY" scripts/render_dashboard.py --prometheus "http://127.0.0.1:$PROM_PORT" \
  --minutes "$MINUTES" --step 2 --rate-interval 8s --out "$OUT" \
  --subtitle "2 replicas behind HAProxy, 3 simulated workers, router-tools bench (conversation trace), $(date -u +%Y-%m-%d)"
