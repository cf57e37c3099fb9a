#!/usr/bin/env bash
# Installs Arize Phoenix (an OpenTelemetry trace backend from PyPI: OTLP over HTTP on its web
# port at /v1/traces and over gRPC, and a REST query API) into .tools/phoenix (git-ignored), for
# the traces test (tests/tests/otel_phoenix.rs, run by scripts/test-traces.sh).
#
# About 850 MB and a minute the first time. Idempotent: does nothing when
# .tools/phoenix/bin/phoenix exists and the venv imports the pinned version. Prints the
# executable and the version on its last line.
#
# Environment: PHOENIX_VERSION (default 20.26.1), PYTHON (the interpreter that creates the
# venv, default python3; Phoenix needs 3.10 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${PHOENIX_VERSION:-20.26.1}"
BASE_PYTHON="${PYTHON:-python3}"
VENV="$PWD/.tools/phoenix"
PY="$VENV/bin/python"
BIN="$VENV/bin/phoenix"

# Prints the installed arize-phoenix version, or nothing when the venv cannot tell.
installed_version() {
  "$PY" -c 'import importlib.metadata as m; print(m.version("arize-phoenix"))' 2>/dev/null || true
}

if [ -x "$BIN" ] && [ "$(installed_version)" = "$VERSION" ]; then
  echo "install-phoenix: $BIN arize-phoenix $VERSION"
  exit 0
fi

if ! command -v "$BASE_PYTHON" >/dev/null 2>&1; then
  echo "install-phoenix: $BASE_PYTHON (3.10 or newer, with the venv module) is needed to create $VENV" >&2
  exit 1
fi
if ! "$BASE_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 10) else 1)'; then
  echo "install-phoenix: arize-phoenix needs Python 3.10 or newer; $BASE_PYTHON is $("$BASE_PYTHON" --version 2>&1)" >&2
  exit 1
fi

echo "install-phoenix: installing arize-phoenix $VERSION into $VENV (about 850 MB, a minute)" >&2
if [ ! -x "$VENV/bin/pip" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! "$BASE_PYTHON" -m venv "$VENV"; then
    echo "install-phoenix: '$BASE_PYTHON -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check "arize-phoenix==$VERSION"

if [ ! -x "$BIN" ] || [ "$(installed_version)" != "$VERSION" ]; then
  echo "install-phoenix: $BIN is not arize-phoenix $VERSION after the install" >&2
  exit 1
fi
echo "install-phoenix: $BIN arize-phoenix $VERSION"
