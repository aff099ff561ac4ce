#!/usr/bin/env bash
# Runs cargo on a crate with a Rust toolchain new enough for it (its `rust-version` in
# Cargo.toml): this directory's crate (the sidecar), or the one --crate names (the goblin
# example's native reference runs this script so, from examples/goblins/reference/cargo.sh).
# Everything that builds the sidecar goes through it: the Makefile (deps-rust, test-rust),
# Overworld.Sidecar.Build and the ExUnit tests that start it.
#
#   cargo.sh [--crate DIR] [--setup] [CARGO ARGUMENTS...]   (from any directory; cargo runs in the crate's)
#
# The toolchain is the first of these whose rustc is at least the crate's rust-version:
#   1. `cargo` on PATH (rustup's proxy on most machines), unless it is Debian's /usr/bin/cargo,
#   2. ~/.cargo/bin/cargo (rustup's, when ~/.cargo/bin is not on PATH),
#   3. /usr/bin/cargo (Debian's: the `cargo` package, Rust 1.63 on Debian 12, too old for this
#      crate; or `cargo-web`, whose /usr/bin/cargo and /usr/bin/rustc are Rust 1.85 in bookworm
#      and newer from bookworm-security).
# Each cargo runs with the rustc (and rustdoc) beside it, in RUSTC and RUSTDOC, so a cargo never
# builds with another toolchain's compiler found earlier on PATH.
#
# --setup (what `make deps-rust` does): when no toolchain is new enough, installs Debian's
# `cargo-web` with apt-get (apt replaces Debian's old `cargo` package if it is installed), and
# prints one line saying which toolchain is used and whether it was installed. Without
# --setup, no toolchain new enough is an error (status 3) that says to run `make deps-rust`.
# With no cargo arguments, only the choice is made (and, with --setup, reported).
set -u
HOME=${HOME:-/nonexistent}

dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "${1:-}" = --crate ]; then
  dir=$(cd "$2" && pwd) || exit 1
  shift 2
fi
cd "$dir" || exit 1

setup=false
if [ "${1:-}" = --setup ]; then
  setup=true
  shift
fi

need=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)
[ -n "$need" ] || { echo "cargo.sh: no rust-version in $dir/Cargo.toml" >&2; exit 1; }

# "1.95.0" from "rustc 1.95.0 (f2d3ce0bd 2026-03-21)" or "rustc 1.96.0-nightly (...)".
version_of() { "$1" --version 2>/dev/null | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p'; }

# at_least A B: version A >= version B (major.minor.patch, missing parts are 0).
at_least() {
  local IFS=.
  local -a a=($1) b=($2)
  local i
  for i in 0 1 2; do
    if [ "${a[i]:-0}" -gt "${b[i]:-0}" ]; then return 0; fi
    if [ "${a[i]:-0}" -lt "${b[i]:-0}" ]; then return 1; fi
  done
  return 0
}

# Where a cargo comes from, for the report.
origin() {
  local real pkg
  real=$(readlink -f "$1")
  if [ -x "$(dirname "$1")/rustup" ] || [[ "$real" == */rustup ]]; then
    echo "rustup"
  elif pkg=$(dpkg-query -S "$real" 2>/dev/null || dpkg-query -S "$1" 2>/dev/null); then
    echo "Debian's ${pkg%%:*}"
  else
    echo "$real"
  fi
}

cargo="" rustc="" found="" rejected=""
choose() {
  local c r v first seen=" "
  cargo="" rustc="" found="" rejected=""
  first=$(command -v cargo 2>/dev/null)
  # Debian's cargo comes last even when PATH finds it first.
  [ -n "$first" ] && [ "$(readlink -f "$first")" = "$(readlink -f /usr/bin/cargo)" ] && first=""
  for c in "$first" "$HOME/.cargo/bin/cargo" /usr/bin/cargo; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    case "$seen" in *" $c "*) continue ;; esac
    seen="$seen$c "
    r="$(dirname "$c")/rustc"
    [ -x "$r" ] || r=$(command -v rustc 2>/dev/null) || continue
    v=$(version_of "$r")
    if [ -n "$v" ] && at_least "$v" "$need"; then
      cargo=$c rustc=$r found=$v
      return 0
    fi
    rejected="$rejected${rejected:+, }$c (rustc ${v:-unusable})"
  done
  return 1
}

installed=""
if ! choose; then
  if ! $setup; then
    echo "cargo.sh: no Rust toolchain of version $need or newer found${rejected:+ (too old: $rejected)}: run \`make deps-rust\` to install one" >&2
    exit 3
  fi
  if dpkg-query -W -f='${Status}' rustup 2>/dev/null | grep -q "install ok installed"; then
    # cargo-web conflicts with Debian's rustup package: let rustup provide the toolchain.
    echo "cargo.sh: Debian's rustup is installed but gives no Rust $need or newer${rejected:+ (too old: $rejected)}: run \`rustup default stable\`" >&2
    exit 3
  fi
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  { $sudo apt-get install -y -q --no-install-recommends cargo-web ||
    { $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends cargo-web; }; } >&2 ||
    { echo "cargo.sh: apt-get install cargo-web failed" >&2; exit 1; }
  installed="installed Debian's cargo-web with apt-get (none was new enough${rejected:+: $rejected}); "
  choose || {
    echo "cargo.sh: cargo-web installed but no Rust $need or newer found${rejected:+ (too old: $rejected)}" >&2
    exit 3
  }
fi

if $setup; then
  echo "Rust for $(sed -n 's/^name *= *"\(.*\)".*/\1/p' Cargo.toml | head -1) (rust-version $need): ${installed}using $cargo ($(origin "$cargo")) with rustc $found"
fi

[ $# -gt 0 ] || exit 0
export RUSTC="$rustc"
rustdoc="$(dirname "$rustc")/rustdoc"
[ -x "$rustdoc" ] && export RUSTDOC="$rustdoc"
exec "$cargo" "$@"
