# Overworld: the two commands are `make run` and `make test`. Each installs what is missing on a
# fresh machine (Debian packages, the Rust toolchain's build of the native reference) and is
# idempotent. The framework is this directory's Mix project; the goblin world is a game of its
# own in examples/goblins (a Mix project depending on the framework by path), with its server
# task, its benchmarks and the native Rust reference of its rules (examples/goblins/reference).

GAME := examples/goblins

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Debian packages the project uses: Elixir/OTP, jiffy (JSON), cowlib (WebSocket framing), Mnesia
# (accounts), crypto (tokens), PropEr for property tests, runtime_tools (scheduler utilization,
# msacc) and tools (eprof) for the benchmarks.
APT_PACKAGES := elixir erlang-dev erlang-jiffy erlang-cowlib erlang-mnesia erlang-crypto \
  erlang-proper erlang-runtime-tools erlang-tools
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# VM flags (docs/architecture.md, "Performance decisions"): schedulers bound to CPUs, so the
# bucket workers of a zone really run in parallel from the first microsecond of a tick.
export ELIXIR_ERL_OPTIONS ?= +sbt db

.PHONY: help run test deps deps-elixir deps-rust deps-ts test-elixir test-example test-rust test-ts bench clean

help:
	@echo "make run    start the goblin world (10,000 goblins) and print its tick statistics"
	@echo "make test   run every test suite (the framework's, the goblin example's, the Rust reference's, the TypeScript SDK's)"
	@echo "make bench  the goblin benchmark at 10K and 100K with the native reference, the wire, 19,000 sessions, persistence, inputs"

deps: deps-elixir deps-rust deps-ts

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
	@cd $(GAME) && mix compile >/dev/null

# The native reference of the goblin benchmark ($(GAME)/reference) is built and tested with the
# cargo its cargo.sh picks: the first Rust toolchain of this machine at least as new as the
# crate's rust-version (rustup's cargo on PATH or in ~/.cargo/bin, else Debian's /usr/bin/cargo),
# Debian's cargo-web installed with apt-get when none is (Debian 12's own cargo, Rust 1.63, is too
# old). deps-rust says in one line which toolchain it used. The goblin benchmark builds the
# reference through the same script (Goblins.Bench.Reference).
CARGO_SH := $(GAME)/reference/cargo.sh

deps-rust:
	@$(CARGO_SH) --setup build --release --quiet

# The TypeScript SDK (clients/typescript): Node 20 and npm, Debian's Chromium for the browser
# test (test/browser.test.ts drives /usr/bin/chromium with playwright-core, which never downloads
# a browser of its own), then the locked dev dependencies (`npm ci`; the npm 11 of our machines
# writes lock files without the other platforms' optional packages, which `npm ci` may refuse:
# then `npm install` from the same lock).
deps-ts:
	@command -v npm >/dev/null || { export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q nodejs npm || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q nodejs npm; }; }
	@[ -x /usr/bin/chromium ] || { export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q --no-install-recommends chromium || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends chromium; }; }
	@cd clients/typescript && { [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || \
	  npm ci --no-audit --no-fund --loglevel=silent || npm install --no-save --no-audit --no-fund --loglevel=error; }

run: deps-elixir
	cd $(GAME) && mix goblins.server

test: deps
	$(MAKE) test-elixir test-example test-rust test-ts

test-elixir:
	mix test

test-example:
	cd $(GAME) && mix test

test-rust:
	$(CARGO_SH) test --release --quiet

test-ts:
	cd clients/typescript && npx tsc -p tsconfig.json --noEmit && npx vitest run

bench: deps
	cd $(GAME) && mix goblins.bench --entities 10000 --seconds 60 --reference --json ../../bench/results/goblins-10k.json
	cd $(GAME) && mix goblins.bench --entities 100000 --seconds 30 --reference --json ../../bench/results/goblins-100k.json
	cd $(GAME) && mix goblins.bench.encode --entities 10000 --observers 500 --seconds 60 --json ../../bench/results/encode-10k.json
	mix overworld.bench.ccu --count 19000 --hold 5 --json bench/results/ccu-19k.json
	cd $(GAME) && mix goblins.bench.persistence --entities 10000 --json ../../bench/results/persistence-10k.json
	cd $(GAME) && mix goblins.bench.inputs --json ../../bench/results/inputs-19k.json

clean:
	rm -rf _build $(GAME)/_build $(GAME)/reference/target clients/typescript/node_modules clients/typescript/dist
