#!/usr/bin/env bash
# Supply-chain checks of the workspace's dependencies against deny.toml (issue #14 item 6):
# `cargo deny check licenses bans sources` (every license allowed, duplicate versions listed as
# warnings, crates only from crates.io), then `advisories` (RustSec) when the advisory
# database can be had: fetched from GitHub, or already in cargo-deny's cache (then checked
# without fetching, and said so). Without either it prints one "advisories: skipped" line and
# does not fail.
#
# cargo-deny itself is installed once into .tools/cargo-deny (git-ignored; a few minutes of
# `cargo install --locked` the first time, reused after; a different pinned version is
# reinstalled). CARGO_DENY_BIN points at another binary instead.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="0.20.2"
ROOT="$PWD/.tools/cargo-deny"
BIN="${CARGO_DENY_BIN:-$ROOT/bin/cargo-deny}"

if [ -z "${CARGO_DENY_BIN:-}" ]; then
  if ! { [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q " $VERSION\$"; }; then
    echo "check-deps: installing cargo-deny $VERSION into $ROOT (once; takes a few minutes)" >&2
    cargo install --quiet --locked --root "$ROOT" --version "$VERSION" cargo-deny
  fi
fi
echo "check-deps: $("$BIN" --version)"

"$BIN" --log-level error check licenses bans sources
# Duplicate versions are warnings: listed for review, they do not fail the check.
duplicates=$("$BIN" --log-level warn check bans 2>&1 | sed -n 's/^warning\[duplicate\]: found \([0-9]*\) duplicate entries for crate .\(.*\).$/\2 (\1)/p' || true)
if [ -n "$duplicates" ]; then
  echo "check-deps: crates in several versions (warnings, see \`cargo deny check bans\`): $(echo "$duplicates" | paste -sd ' ' | sed 's/) /), /g')"
fi

# Advisories need the RustSec database (a git repository on GitHub).
if timeout 120 "$BIN" --log-level error fetch db >/dev/null 2>&1; then
  "$BIN" --log-level error check --disable-fetch advisories
  echo "check-deps: advisories checked against a fresh RustSec database"
elif [ -n "$(find "${CARGO_HOME:-$HOME/.cargo}/advisory-dbs" -maxdepth 2 -name '.git' 2>/dev/null | head -n 1)" ]; then
  "$BIN" --log-level error check --disable-fetch advisories
  echo "check-deps: advisories checked against the cached RustSec database (could not fetch a newer one)"
else
  echo "check-deps: advisories: skipped (the RustSec advisory database cannot be fetched from github.com here and none is cached; run scripts/check-deps.sh where GitHub is reachable)"
fi
