#!/usr/bin/env bash
# The router comparison's smoke tests (tests/tests/system/compare_routers.rs, ignored by default,
# in the `system` test binary):
# `compare-routers` over a short synthesised trace with heavy prefix sharing, HAProxy round
# robin and one Switchyard replica on the same fresh fleet (each row all ok, Switchyard's hit
# rate at least round robin's, a missing peer reported as such), and the same two routers in
# two rounds (`--repeat 2`, with a `--switchyard-config`): each round's results kept, the
# order rotated, one table of medians. About a minute.
#
# Then the same with SGLang's gateway, when it is installed (.tools/peers, from
# scripts/install-peers.sh). The peers are never required: SWITCHYARD_COMPARE_PEERS=1 (which
# .ci/run sets) installs the gateway first (one small wheel, seconds, cached afterwards); an
# install that fails only skips that comparison.
#
# Needs nats-server and HAProxy (NATS_SERVER_BIN / HAPROXY_BIN, or scripts/install-nats.sh and
# scripts/install-haproxy.sh, which scripts/test.sh runs first).
set -euo pipefail
cd "$(dirname "$0")/.."

export NATS_SERVER_BIN="${NATS_SERVER_BIN:-$PWD/.tools/nats/bin/nats-server}"
export HAPROXY_BIN="${HAPROXY_BIN:-$PWD/.tools/haproxy/bin/haproxy}"

# The binaries the tests run, built as `cargo test --workspace` builds them (the same
# features, so after the workspace's tests this is no work and nothing is built twice).
cargo test --workspace --locked --no-run
cargo test --workspace --locked --test system -- --ignored \
  compare_routers::switchyard_hits_at_least_round_robin_and_a_missing_peer_is_a_row \
  compare_routers::two_rounds_keep_each_round_and_rank_the_routers_by_medians

if [ "${SWITCHYARD_COMPARE_PEERS:-}" = "1" ]; then
  PEERS=sglang-gateway ./scripts/install-peers.sh || true
fi
if [ -f .tools/peers/ok/sglang-router-0.3.2 ] && [ -x .tools/peers/bin/smg ]; then
  cargo test --workspace --locked --test system -- --ignored \
    compare_routers::the_sglang_gateway_runs_on_the_same_fleet
else
  echo "test-compare: SGLang's gateway is not installed (scripts/install-peers.sh, or" \
    "SWITCHYARD_COMPARE_PEERS=1): its comparison skipped"
fi
