# Overworld: the two commands are `make run` and `make test`. Each installs what is missing on a
# fresh machine (Debian packages, the Rust toolchain's build of the native reference) and is
# idempotent.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Debian packages the project uses: Elixir/OTP, jiffy (JSON), PropEr for property tests,
# runtime_tools (scheduler utilization, msacc) and tools (eprof) for the benchmarks.
APT_PACKAGES := elixir erlang-dev erlang-jiffy erlang-proper erlang-runtime-tools erlang-tools
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# VM flags (see docs/performance.md): schedulers bound to CPUs, so the bucket workers of a zone
# really run in parallel from the first microsecond of a tick.
export ELIXIR_ERL_OPTIONS ?= +sbt db

.PHONY: help run test deps deps-elixir deps-rust test-elixir test-rust bench clean

help:
	@echo "make run    start the goblin world (10,000 goblins) and print its tick statistics"
	@echo "make test   run every test suite (Elixir, Rust reference)"
	@echo "make bench  the goblin benchmark at 10K and 100K with the native reference"

deps: deps-elixir deps-rust

# Installs the Debian packages that are missing (apt-get update only when needed).
deps-elixir:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q $$missing || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $$missing; }; \
	fi
	@mix compile >/dev/null

# The native reference of the goblin benchmark (bench/reference) needs cargo: rustup's if it is
# there, else Debian's.
deps-rust:
	@command -v cargo >/dev/null || { export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q cargo || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q cargo; }; }
	@cd bench/reference && cargo build --release --quiet

run: deps-elixir
	mix overworld.server

test: deps
	$(MAKE) test-elixir test-rust

test-elixir:
	mix test

test-rust:
	cd bench/reference && cargo test --release --quiet

bench: deps
	mix overworld.bench.goblins --entities 10000 --seconds 60 --reference --json bench/results/goblins-10k.json
	mix overworld.bench.goblins --entities 100000 --seconds 30 --reference --json bench/results/goblins-100k.json

clean:
	rm -rf _build bench/reference/target
