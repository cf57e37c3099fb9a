#!/usr/bin/env bash
# Installs the Python tools of the tests into .tools/py (git-ignored): a venv with the official
# `openai` client, which router-node/tests/integration/openai_python_client.rs drives against a
# node.
# Idempotent: does nothing when .tools/py/bin/python already imports an `openai` of the pinned
# major version. Prints the interpreter and the client's version on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="$PWD/.tools/py"
PY="$VENV/bin/python"
# The current major version of the client (PyPI: 3.x); a new major is a deliberate bump.
SPEC='openai>=3,<4'
MAJOR=3

# Prints the installed openai version, or nothing when the venv cannot import it.
openai_version() {
  "$PY" -c 'import openai; print(openai.__version__)' 2>/dev/null || true
}

pinned() {
  local v
  v=$(openai_version)
  [ -n "$v" ] && [ "${v%%.*}" = "$MAJOR" ]
}

if [ -x "$PY" ] && pinned; then
  echo "install-pytools: $PY openai $(openai_version)"
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
  echo "install-pytools: python3 (with the venv module) is needed to create $VENV" >&2
  exit 1
fi

echo "install-pytools: installing '$SPEC' from PyPI into $VENV" >&2
if [ ! -x "$VENV/bin/pip" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv "$VENV"; then
    echo "install-pytools: 'python3 -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade "$SPEC"

if ! pinned; then
  echo "install-pytools: $PY cannot import openai $MAJOR.x after the install" >&2
  exit 1
fi
echo "install-pytools: $PY openai $(openai_version)"
