#!/usr/bin/env bash
# The project's test command (README): formatting, lints, every test of the workspace, the
# dependency policy (deny.toml), then the real-engine suite.
# Installs what the tests need when it is missing, so it works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "scripts/test.sh: cargo is not installed; install a Rust toolchain (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# The debug build of every test target takes about 2 GB (more with incremental state);
# say how much room there is so a full disk is obvious from the log.
echo "== disk: $(df -h . | awk 'NR==2 {print $4 " free on " $6}')"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== router-core stays pure (scripts/check-core-purity.sh)"
./scripts/check-core-purity.sh

echo "== nats-server for the NATS bus tests (scripts/install-nats.sh)"
./scripts/install-nats.sh
NATS_SERVER_BIN="$PWD/.tools/nats/bin/nats-server"
export NATS_SERVER_BIN

echo "== HAProxy for the cluster tests (scripts/install-haproxy.sh)"
./scripts/install-haproxy.sh
HAPROXY_BIN="$PWD/.tools/haproxy/bin/haproxy"
export HAPROXY_BIN

echo "== deployment files: compose, Kubernetes, Dockerfile (scripts/check-deploy.sh)"
./scripts/check-deploy.sh

echo "== the openai Python client for the client tests (scripts/install-pytools.sh)"
./scripts/install-pytools.sh
SWITCHYARD_PYTHON="$PWD/.tools/py/bin/python"
export SWITCHYARD_PYTHON

echo "== cargo test"
cargo test --workspace --locked

# After the fast suites: the first run installs cargo-deny into .tools (a few minutes, then
# cached there); advisories only when the RustSec database can be fetched (else a skip line).
echo "== supply chain: licenses, bans, sources, advisories (scripts/check-deps.sh)"
./scripts/check-deps.sh

# Heavy suites last, after every fast one passed.
if [ "${SWITCHYARD_SKIP_COMPARE:-}" = "1" ]; then
  echo "== router comparison: skipped (SWITCHYARD_SKIP_COMPARE=1)"
else
  echo "== router comparison smoke (scripts/test-compare.sh)"
  ./scripts/test-compare.sh
fi
if [ "${SWITCHYARD_SKIP_TRACE_BACKEND:-}" = "1" ]; then
  echo "== traces in a real backend: skipped (SWITCHYARD_SKIP_TRACE_BACKEND=1)"
else
  echo "== traces in a real backend (scripts/test-traces.sh)"
  ./scripts/test-traces.sh
fi
if [ "${SWITCHYARD_SKIP_REAL_ENGINES:-}" = "1" ]; then
  echo "== real engines: skipped (SWITCHYARD_SKIP_REAL_ENGINES=1)"
else
  echo "== real engines (scripts/test-real-engines.sh)"
  ./scripts/test-real-engines.sh
fi
