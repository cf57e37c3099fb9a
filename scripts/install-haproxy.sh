#!/usr/bin/env bash
# Installs HAProxy for the cluster tests into .tools/haproxy (git-ignored), from Debian's
# packages, without installing anything system-wide: `apt-get download` fetches the haproxy
# package and each library package it needs that the machine does not have (recursively),
# `dpkg -x` unpacks them under .tools/haproxy/root, and .tools/haproxy/bin/haproxy is a small
# wrapper that runs the unpacked binary with the unpacked libraries on LD_LIBRARY_PATH.
# Checks that `ldd` resolves every library of the binary.
# Idempotent and quiet when already installed: prints the path and version on its last line.
# Needs apt (Debian or Ubuntu); runs `apt-get update` first when the package lists do not
# know haproxy and it runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="$PWD/.tools/haproxy"
BIN="$TOOLS/bin/haproxy"
ROOT="$TOOLS/root"

# The first line of `haproxy -v`, or nothing when it does not run.
version_of() {
  local out
  out=$("$1" -v 2>/dev/null) || return 0
  printf '%s\n' "${out%%$'\n'*}"
}

runs() {
  [[ "$(version_of "$1")" == "HAProxy version"* ]]
}

if [ -x "$BIN" ] && runs "$BIN"; then
  echo "install-haproxy: $BIN $(version_of "$BIN")"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-haproxy: apt-get is needed (Debian's haproxy package); or set HAPROXY_BIN" >&2
  exit 1
fi
if ! apt-cache show haproxy >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "install-haproxy: apt-get update (the package lists do not know haproxy)" >&2
    apt-get update -qq >/dev/null
  else
    echo "install-haproxy: the package lists do not know haproxy: run 'apt-get update' as root" >&2
    exit 1
  fi
fi

echo "install-haproxy: unpacking Debian's haproxy and its missing libraries into $TOOLS" >&2
DEBS=$(mktemp -d)
trap 'rm -rf "$DEBS"' EXIT
# apt's download user (_apt) writes into this directory.
chmod 0777 "$DEBS"

installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

# haproxy, then every library package it needs (directly or through another one) that is
# not installed on this machine.
wanted=(haproxy)
queue=(haproxy)
while [ "${#queue[@]}" -gt 0 ]; do
  pkg=${queue[0]}
  queue=("${queue[@]:1}")
  # The first alternative of each Depends/PreDepends line that names a library package.
  for dep in $(apt-cache depends "$pkg" 2>/dev/null |
    sed -n 's/^ *\(Pre\)\{0,1\}Depends: \(lib[^ <>]*\)$/\2/p' | sort -u); do
    if installed "$dep" || [[ " ${wanted[*]} " == *" $dep "* ]]; then
      continue
    fi
    wanted+=("$dep")
    queue+=("$dep")
  done
done

(cd "$DEBS" && apt-get download -qq "${wanted[@]}" >"$DEBS/download.log" 2>&1) || {
  echo "install-haproxy: apt-get download ${wanted[*]} failed:" >&2
  cat "$DEBS/download.log" >&2
  exit 1
}
rm -rf "$ROOT"
mkdir -p "$ROOT" "$TOOLS/bin"
for deb in "$DEBS"/*.deb; do
  dpkg -x "$deb" "$ROOT"
done

REAL="$ROOT/usr/sbin/haproxy"
if [ ! -x "$REAL" ]; then
  echo "install-haproxy: the haproxy package held no usr/sbin/haproxy" >&2
  exit 1
fi

# Every directory of the unpacked tree that holds a shared library, relative to the root.
LIBDIRS=$(cd "$ROOT" && find . -name '*.so*' -printf '%h\n' | sed 's|^\./||' | sort -u | tr '\n' ' ')
cat >"$BIN" <<EOF
#!/bin/sh
# Written by scripts/install-haproxy.sh: Debian's haproxy unpacked under ../root, run with the
# libraries unpacked next to it.
root="\$(cd "\$(dirname "\$0")/../root" && pwd)"
libs=""
for dir in $LIBDIRS; do libs="\$libs\${libs:+:}\$root/\$dir"; done
LD_LIBRARY_PATH="\$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$root/usr/sbin/haproxy" "\$@"
EOF
chmod +x "$BIN"

libpath=""
for dir in $LIBDIRS; do libpath="$libpath${libpath:+:}$ROOT/$dir"; done
missing=$(LD_LIBRARY_PATH="$libpath" ldd "$REAL" | grep 'not found' || true)
if [ -n "$missing" ]; then
  echo "install-haproxy: libraries of $REAL still missing:" >&2
  echo "$missing" >&2
  exit 1
fi
if ! runs "$BIN"; then
  echo "install-haproxy: $BIN does not run: $("$BIN" -v 2>&1 | head -n 3)" >&2
  exit 1
fi
echo "install-haproxy: $BIN $(version_of "$BIN")"
