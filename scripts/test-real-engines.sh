#!/usr/bin/env bash
# The real-engine suite (tests/tests/real_vllm.rs): Switchyard in front of two real CPU vLLM
# engines, in both shapes (one node with [[engines]]; link sidecars and two replicas over NATS).
# Installs what it needs when missing, cached under .tools/: the CPU vLLM (.tools/vllm, about
# 4 minutes and 6.3 GB the first time), the tiny local model (.tools/models/tiny-llama, seconds),
# nats-server. Then runs the suite (engines start in 1-2 minutes each on a 2-core machine).
# scripts/test.sh runs it after the fast suites; SWITCHYARD_SKIP_REAL_ENGINES=1 skips it there.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== the CPU vLLM (scripts/install-vllm.sh)"
./scripts/install-vllm.sh
echo "== the tiny local models (scripts/make-tiny-model.py)"
.tools/vllm/bin/python scripts/make-tiny-model.py .tools/models/tiny-llama
# A second model with another tokenizer, and a LoRA adapter of it (the multi-model test).
.tools/vllm/bin/python scripts/make-tiny-model.py .tools/models/tiny-llama-b --vocab-size 600 \
  --lora-out .tools/models/tiny-llama-b-lora
echo "== nats-server (scripts/install-nats.sh)"
./scripts/install-nats.sh
NATS_SERVER_BIN="$PWD/.tools/nats/bin/nats-server"
export NATS_SERVER_BIN

echo "== cargo test: real vLLM engines behind Switchyard"
# The binaries the tests run, built as `cargo test --workspace` builds them (the same
# features, so after the workspace's tests this is no work and nothing is built twice).
cargo test --workspace --locked --no-run
# One test at a time: each starts its own CPU engines.
cargo test --workspace --locked --test real_vllm -- --ignored --nocapture --test-threads 1
