#!/usr/bin/env bash
# router-core must stay pure (no async runtime, no sockets, no file watching, no HTTP): this
# fails when its normal dependency tree (dev-dependencies excluded: criterion may time and
# read what it likes) holds a crate that does I/O or runs an event loop. Its clippy.toml
# forbids the std clock, sleep, file and socket calls in its own code.
set -euo pipefail
cd "$(dirname "$0")/.."

# Crate names (exact, or a prefix ending in `-`) that have no place under router-core.
FORBIDDEN=(
  tokio tokio- mio async- futures-io smol
  hyper hyper- reqwest axum tower tower- h2 http-body
  socket2 nix
  notify inotify
  async-nats nats ractor
)

tree=$(cargo tree -p router-core -e normal --prefix none --format '{p}' --locked)
crates=$(printf '%s\n' "$tree" | awk '{print $1}' | sort -u)

found=()
for name in $crates; do
  for bad in "${FORBIDDEN[@]}"; do
    if [[ "$bad" == *- && "$name" == "$bad"* ]] || [[ "$name" == "$bad" ]]; then
      found+=("$name")
      break
    fi
  done
done

if ((${#found[@]})); then
  echo "check-core-purity: router-core's dependency tree holds I/O or async crates:" >&2
  for name in "${found[@]}"; do
    echo "  $name (cargo tree -p router-core -e normal -i $name shows why)" >&2
  done
  exit 1
fi
echo "check-core-purity: router-core's $(printf '%s\n' "$crates" | wc -l) normal dependencies hold no I/O or async crate"
