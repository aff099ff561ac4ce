#!/usr/bin/env bash
# Runs cargo on this crate (the goblin rules' native reference) with the framework's toolchain
# choice: Overworld's sidecar/cargo.sh, which picks the first Rust toolchain new enough for the
# crate's rust-version (and with --setup installs one). The Makefile (deps-rust, test-rust) and
# the goblin benchmark (Goblins.Bench.Reference) build the reference through this script.
#
#   cargo.sh [--setup] [CARGO ARGUMENTS...]      (from any directory; cargo runs in this one)
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$dir/../../../sidecar/cargo.sh" --crate "$dir" "$@"
