#!/usr/bin/env bash
# Installs the peer routers that `compare-routers` (tests/src/bin/compare-routers.rs) puts in
# front of the same simulated fleet as Switchyard, into one venv at .tools/peers (git-ignored):
#
#   sglang-gateway  sglang-router 0.3.2 (SGLang's gateway, entry point `smg`)
#   vllm-router     vllm-router 0.1.17 (vLLM's router, a fork of SGLang's gateway)
#   dynamo          ai-dynamo and ai-dynamo-runtime 1.6.1 (NVIDIA Dynamo: `python -m
#                   dynamo.frontend` and its simulated engines, `python -m dynamo.mocker`)
#
# Each peer is optional: one that fails to install is reported and skipped, the others are
# still installed. `pip install ai-dynamo` cannot work here (its `aisimulate` dependency is a
# stub that downloads from a host that is not reachable), so both Dynamo wheels are installed
# with --no-deps and then the requirements the frontend and the mocker import (no torch, no
# Kubernetes or Redis client: neither is used without those backends).
#
# About 800 MB and a few minutes the first time. Idempotent and cached: a peer whose marker
# (.tools/peers/ok/<name>) is there and whose entry point still runs is not installed again.
# Prints one line per peer on stdout (`install-peers: <name> ok|failed|skipped ...`).
# Exit 0 when at least one peer is installed, 1 when none is.
#
# Environment: PYTHON (the interpreter that creates the venv, default python3, 3.10 or
# newer), PEERS (a comma-separated subset of the names above, default all).
set -uo pipefail
cd "$(dirname "$0")/.."

BASE_PYTHON="${PYTHON:-python3}"
VENV="$PWD/.tools/peers"
PY="$VENV/bin/python"
OK_DIR="$VENV/ok"
WANTED=",${PEERS:-sglang-gateway,vllm-router,dynamo},"
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)

SGLANG_VERSION=0.3.2
VLLM_ROUTER_VERSION=0.1.17
DYNAMO_VERSION=1.6.1
# What dynamo.frontend and dynamo.mocker import, from ai-dynamo's and ai-dynamo-runtime's
# requirements (without aisimulate, kubernetes, redis).
DYNAMO_REQUIREMENTS=(
  'aiohttp>=3.14.3,<4' 'msgspec>=0.19' 'prometheus-client>=0.23.1,<1' 'pyzmq>=26'
  'tqdm>=4' 'transformers>=4.56' 'typing-extensions>=4.10' 'zstandard>=0.23,<1'
  'pydantic>=2.10.6,<=2.13.5' 'uvloop>=0.21'
)

say() { echo "install-peers: $*"; }
wanted() { [[ "$WANTED" == *",$1,"* ]]; }

if ! command -v "$BASE_PYTHON" >/dev/null 2>&1; then
  say "$BASE_PYTHON (3.10 or newer, with the venv module) is needed to create $VENV" >&2
  exit 1
fi
if ! "$BASE_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)'; then
  say "the peers need Python 3.10 or newer; $BASE_PYTHON is $("$BASE_PYTHON" --version 2>&1)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/pip" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! "$BASE_PYTHON" -m venv "$VENV"; then
    say "'$BASE_PYTHON -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
mkdir -p "$OK_DIR"

# The registry, asked once before anything is downloaded.
registry_checked=""
registry_reachable() {
  if [ -z "$registry_checked" ]; then
    if timeout 60 "$PY" -m pip index versions sglang-router >/dev/null 2>&1; then
      registry_checked=yes
    else
      registry_checked=no
      say "the package index is not reachable (pip index versions failed); nothing installed" >&2
    fi
  fi
  [ "$registry_checked" = yes ]
}

installed_count=0
# install_peer NAME MARKER CHECK STEPS: CHECK and STEPS are functions; CHECK succeeds when the
# peer's entry point runs.
install_peer() {
  local name="$1" marker="$2" check="$3" steps="$4"
  if ! wanted "$name"; then
    say "$name skipped (not in PEERS)"
    return
  fi
  if [ -f "$OK_DIR/$marker" ] && "$check" >/dev/null 2>&1; then
    say "$name ok ($marker, cached)"
    installed_count=$((installed_count + 1))
    return
  fi
  rm -f "$OK_DIR/$marker"
  if ! registry_reachable; then
    say "$name failed (no package index)"
    return
  fi
  echo "install-peers: installing $marker into $VENV" >&2
  if "$steps" && "$check" >/dev/null 2>&1; then
    touch "$OK_DIR/$marker"
    say "$name ok ($marker)"
    installed_count=$((installed_count + 1))
  else
    say "$name failed (see the pip output above); compare-routers reports it as not installed"
  fi
}

sglang_check() { "$VENV/bin/smg" --help; }
sglang_steps() { "${PIP[@]}" "sglang-router==$SGLANG_VERSION"; }
vllm_router_check() { "$VENV/bin/vllm-router" --help; }
vllm_router_steps() { "${PIP[@]}" "vllm-router==$VLLM_ROUTER_VERSION"; }
dynamo_check() { "$PY" -c 'import dynamo.frontend, dynamo.mocker'; }
dynamo_steps() {
  echo "install-peers: (pip then says aisimulate, kubernetes and redis are not installed: on purpose)" >&2
  "${PIP[@]}" --no-deps "ai-dynamo==$DYNAMO_VERSION" "ai-dynamo-runtime==$DYNAMO_VERSION" &&
    "${PIP[@]}" "${DYNAMO_REQUIREMENTS[@]}"
}

install_peer sglang-gateway "sglang-router-$SGLANG_VERSION" sglang_check sglang_steps
install_peer vllm-router "vllm-router-$VLLM_ROUTER_VERSION" vllm_router_check vllm_router_steps
install_peer dynamo "ai-dynamo-$DYNAMO_VERSION" dynamo_check dynamo_steps

if [ "$installed_count" -eq 0 ]; then
  say "no peer installed"
  exit 1
fi
say "$installed_count peer(s) in $VENV"
