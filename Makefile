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
# msacc) and tools (eprof) for the benchmarks, ssl and public_key (TLS distribution) with
# openssl (certificates for a local TLS cluster); the PostgreSQL client (Overworld.Postgres)
# and the PostgreSQL server its tests and benches start (lib/overworld/bench/postgres_server.ex); luerl, the Lua
# interpreter of Overworld.Lua; Prometheus (promtool checks GET /metrics, and the dashboard's
# test scrapes a server with it: docs/metrics.md); gcc and libc6-dev, the C compiler of the
# shared segment's NIF (c_src/, built by `mix compile`) and the linker Rust's builds call.
APT_PACKAGES := elixir erlang-dev gcc libc6-dev erlang-jiffy erlang-cowlib erlang-mnesia erlang-crypto \
  erlang-proper erlang-runtime-tools erlang-tools erlang-ssl erlang-public-key openssl \
  erlang-p1-pgsql postgresql wrk tsung erlang-luerl prometheus
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# VM flags (docs/architecture.md, "Performance decisions"): schedulers bound to CPUs, so the
# bucket workers of a zone really run in parallel from the first microsecond of a tick.
export ELIXIR_ERL_OPTIONS ?= +sbt db

.PHONY: owload help run test deps deps-elixir deps-rust deps-ts deps-go test-elixir test-example test-rust test-ts test-go bench bench-full clean

help:
	@echo "make run    start the goblin world (2 x 2 zones of 10,000 goblins) and print its tick statistics"
	@echo "make test   run every test suite (the framework's, the goblin example's, the Rust reference's, the TypeScript SDK's)"
	@echo "make bench       every benchmark, short (a few minutes in all; JSON in bench/results/short/, figures not meaningful)"
	@echo "make bench-full  the commands docs/benchmarks.md quotes for its figures (hours; JSON in bench/results/)"

deps: deps-elixir deps-rust deps-ts deps-go

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

# The sidecar (sidecar/: physics and pathfinding, docs/sidecar.md) is built with its own copy
# of the same script; the zones that use it start sidecar/target/release/overworld-sidecar.
SIDECAR_SH := sidecar/cargo.sh

deps-rust:
	@$(CARGO_SH) --setup build --release --quiet
	@$(SIDECAR_SH) build --release --quiet

# The TypeScript SDK (clients/typescript): Node 20 or later and npm, Debian's Chromium for the browser
# test (test/browser.test.ts drives /usr/bin/chromium with playwright-core, which never downloads
# a browser of its own), then the locked dev dependencies (`npm ci`; the npm 11 of our machines
# writes lock files without the other platforms' optional packages, which `npm ci` may refuse:
# then `npm install` from the same lock).
deps-ts:
	@command -v npm >/dev/null || { export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q nodejs npm || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q nodejs npm; }; }
	@# Debian 12's nodejs is 18, older than playwright-core (and our package.json) accept: then
	@# Node 20 from the npm registry (its `node` package) into /usr/local, ahead of /usr on PATH.
	@[ "$$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ] || { \
	  echo "installing Node 20 into /usr/local (npm install -g node@20): this Node is older"; \
	  $(SUDO) npm install -g --prefix /usr/local node@20 --no-audit --no-fund --loglevel=error; }
	@[ "$$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ] || { \
	  echo "Node 20 or later is needed; node on PATH is $$(node --version 2>/dev/null || echo missing) (put /usr/local/bin first on PATH)" >&2; exit 1; }
	@[ -x /usr/bin/chromium ] || { export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q --no-install-recommends chromium || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends chromium; }; }
	@cd clients/typescript && { [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || \
	  npm ci --no-audit --no-fund --loglevel=silent || npm install --no-save --no-audit --no-fund --loglevel=error; }
	@cd clients/console && { [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || \
	  npm ci --no-audit --no-fund --loglevel=silent || npm install --no-save --no-audit --no-fund --loglevel=error; }

# The native load generator (bench/loadgen: Go, standard library only), which
# `mix overworld.bench.capacity` and `overworld.bench.profile` build and run: the machine's Go (on PATH or in /usr/local/go),
# else Debian's golang-go (Go 1.19, new enough) installed with apt-get.
GO = $(shell command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || echo /usr/bin/go)

deps-go:
	@[ -x "$(GO)" ] || { echo "installing golang-go (Go, for the load generator)"; export DEBIAN_FRONTEND=noninteractive; \
	  $(SUDO) apt-get install -y -q golang-go || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q golang-go; }; }

# The schedulers do not busy-wait for work (`+sbwt none` and the dirty ones' too): on a machine
# of few cores shared with other processes, spinning schedulers burn CPU that the zone's tick
# and the sessions need (docs/benchmarks.md, "Players per node").
ERL_SPIN = +sbwt none +sbwtdcpu none +sbwtdio none

run: deps-elixir
	cd $(GAME) && ERL_FLAGS="$(ERL_SPIN)" mix goblins.server --zones 2x2

test: deps
	$(MAKE) test-elixir test-example test-rust test-ts test-go

# ExUnit reports a failure where it happens, minutes before the end of a long run: a failed
# run prints its failures' reports again, last (from the run's log in tmp/).
MIX_TEST = mkdir -p tmp && set -o pipefail && mix test 2>&1 | tee tmp/mix-test.log || \
  { echo; echo "== the failures above, again:"; \
    awk '/^  [0-9]+\) /{p=1} p && /^[^ ]/{p=0} p' tmp/mix-test.log; exit 2; }

test-elixir:
	$(MIX_TEST)

test-example:
	cd $(GAME) && $(MIX_TEST)

test-rust:
	$(CARGO_SH) test --release --quiet
	$(SIDECAR_SH) test --release --quiet

test-ts:
	cd clients/typescript && npx tsc -p tsconfig.json --noEmit && npx vitest run
	cd clients/console && npx tsc -p tsconfig.json --noEmit && npm run --silent check && npm test --silent

test-go:
	cd bench/loadgen && $(GO) vet ./... && $(GO) test ./...

# The bots play against the goblin server: $(call with_server,PORT,COMMANDS) starts it in the
# background as docs/benchmarks.md does (`mix goblins.server --port PORT` in $(GAME); the port
# must be free), runs COMMANDS once it accepts connections, and stops the server (SIGTERM to its
# process group) however COMMANDS end.
define with_server
$(call with_server_args,$(1),,$(2))
endef

# The same with options for goblins.server: $(1) the port, $(2) the options, $(3) the command.
define with_server_args
if (exec 3<>/dev/tcp/127.0.0.1/$(1)) 2>/dev/null; then echo "port $(1) is in use: stop what listens there first" >&2; exit 1; fi; \
set -m; (cd $(GAME) && mix goblins.server --port $(1) $(2)) & server=$$!; set +m; \
trap 'kill -TERM -- -'$$server' 2>/dev/null; wait '$$server'' EXIT; \
waited=0; until (exec 3<>/dev/tcp/127.0.0.1/$(1)) 2>/dev/null; do \
  kill -0 $$server 2>/dev/null || exit 1; \
  [ $$((waited += 1)) -le 180 ] || { echo "the goblin server did not listen on port $(1) within 180 s" >&2; exit 1; }; \
  sleep 1; done; \
$(3)
endef

# The Go load generator, built (when its sources changed) for the runs that start it
# themselves, as the capacity bench builds it (Overworld.Bench.Loadgen.build!/0).
OWLOAD := _build/owload
owload: deps-go deps-elixir
	mix run --no-start -e 'Overworld.Bench.Loadgen.build!()'

# Players crossing borders (the goblin server started beside it with --players border): $(1)
# Go clients swinging across the border (the rates), then $(2) decoding bots walking across it
# (what clients see), against port $(3); the clients' window lasts $(4) s, the bots' $(6) s,
# ending inside the clients'; the JSON goes to $(5)-loadgen-$(1).json and $(5)-bots-$(2).json.
define crossing
nice -n 10 $(OWLOAD) -url ws://127.0.0.1:$(3)/ws -clients $(1) -ramp 30 -warmup 14 -seconds $(4) -swing 12 -json $(5)-loadgen-$(1).json & lg=$$!; \
sleep 10; mix overworld.bots --url ws://127.0.0.1:$(3)/ws --count $(2) --ramp 10 --warmup 6 --seconds $(6) --decode --input Overworld.Bots.BorderWalk --nice 10 --json $(5)-bots-$(2).json; wait $$lg
endef

# `make bench`: every benchmark of docs/benchmarks.md once, short: the same tasks as bench-full
# with small sizes and durations (a few minutes in all), to see that they run. Their JSON goes to
# bench/results/short/ (not kept in git); their figures mean nothing. test/bench_commands_test.exs
# checks that every task of bench-full is here.
SHORT := bench/results/short
# The short bots' server port (not 4000, which `make run` uses).
BENCH_PORT ?= 4100

bench: deps owload
	cd $(GAME) && mix goblins.bench --entities 10000 --seconds 10 --reference --json ../../$(SHORT)/goblins-10k.json
	cd $(GAME) && mix goblins.bench --entities 100000 --seconds 5 --reference --json ../../$(SHORT)/goblins-100k.json
	cd $(GAME) && mix goblins.bench.encode --entities 10000 --observers 100 --seconds 10 --json ../../$(SHORT)/encode-10k.json
	mix overworld.bench.ccu --count 1000 --hold 1 --json $(SHORT)/ccu-1k.json
	$(call with_server,$(BENCH_PORT),mix overworld.bots --url ws://127.0.0.1:$(BENCH_PORT)/ws --count 100 --input-hz 10 --seconds 10 --ramp 100 --warmup 3 --nice 10 --json $(SHORT)/bots-100.json)
	$(call with_server,$(BENCH_PORT),mix overworld.bots --url ws://127.0.0.1:$(BENCH_PORT)/ws --count 100 --input-hz 10 --seconds 10 --ramp 100 --warmup 3 --json $(SHORT)/bots-100-equal.json)
	cd $(GAME) && mix goblins.bench.inputs --players 2000 --rounds 1 --seconds 3 --json ../../$(SHORT)/inputs-2k.json
	cd $(GAME) && mix goblins.bench.persistence --samples 5 --seconds 1 --zone-seconds 2 --rounds 2 --kills 20 --json ../../$(SHORT)/persistence-10k.json
	cd $(GAME) && mix overworld.bench.capacity --server "mix goblins.server" --bots 0,50 --seconds 5 --warmup 2 --json ../../$(SHORT)/capacity.json
	cd $(GAME) && mix overworld.bench.profile --serve "goblins.server --no-persist" --clients 20 --warmup 1 --seconds 2 --eprof Overworld.Transport.Conn --eprof-seconds 1 --json ../../$(SHORT)/profile.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 2000 --seconds 3 --warmup 1 --rounds 1 --migrate 0.25 --observers 4 --json ../../$(SHORT)/world.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 500 --kills 2 --probe-seconds 2 --observers 1,100 --sessions 60 --players 12 --player-seconds 3 --json ../../$(SHORT)/cluster.json
	$(call with_server_args,$(BENCH_PORT),--zones 2x2 --entities 1000 --players border --no-persist,$(call crossing,20,4,$(BENCH_PORT),10,$(SHORT)/world-crossing,5))
	mix overworld.bench.backend --workload register --seconds 3 --json $(SHORT)/backend-register.json
	mix overworld.bench.backend --workload login --seconds 3 --json $(SHORT)/backend-login.json
	mix overworld.bench.backend --workload rpc-lua --seconds 3 --json $(SHORT)/backend-rpc-lua.json
	mix overworld.bench.backend --workload storage --storage postgres --seconds 3 --json $(SHORT)/backend-storage-postgres.json
	mix overworld.bench.backend --workload matches --handler echo_lua --players 100 --seconds 3 --json $(SHORT)/backend-matches-lua.json
	mix overworld.bench.backend --tsung bench/tsung/register.xml --json $(SHORT)/backend-tsung-register.json
	mix overworld.bench.metrics --zones 20 --entities 200 --samples 200 --warmup 1 --baseline 1 --http 10 --json $(SHORT)/metrics-scrape.json
	cd $(GAME) && mix goblins.bench.visualizer --warmup 2 --seconds 3 --json ../../$(SHORT)/visualizer-fps.json
	cd $(GAME) && mix goblins.bench.visualizer --observers 0,1 --rounds 1 --seconds 2 --json ../../$(SHORT)/visualizer-observers.json
	mix overworld.bench.sidecar --bodies 500,2000 --ticks 20 --kills 3 --kill-bodies 2000 --json $(SHORT)/sidecar.json

# `make bench-full`: exactly the commands docs/benchmarks.md quotes for its figures (some hours:
# 340 s runs, the persistence series), writing the JSON the doc names in bench/results/.
# test/bench_commands_test.exs checks that these commands and the doc's are the same.
bench-full: deps owload
	cd $(GAME) && mix goblins.bench --entities 10000 --seconds 340 --reference --json ../../bench/results/goblins-10k.json
	cd $(GAME) && mix goblins.bench --entities 100000 --seconds 60 --reference --json ../../bench/results/goblins-100k.json
	cd $(GAME) && mix goblins.bench.encode --entities 10000 --observers 500 --seconds 340 --json ../../bench/results/encode-10k.json
	mix overworld.bench.ccu --count 19000 --hold 5 --json bench/results/ccu-19k.json
	mix overworld.bench.ccu --count 20000 --hold 5 --json bench/results/ccu-20k.json
	$(call with_server,4000,mix overworld.bots --url ws://127.0.0.1:4000/ws --count 1000 --input-hz 10 --seconds 340 --ramp 250 --warmup 20 --nice 10 --json bench/results/bots-1000-340s.json)
	$(call with_server,4000,mix overworld.bots --url ws://127.0.0.1:4000/ws --count 1000 --input-hz 10 --seconds 340 --ramp 250 --warmup 20 --json bench/results/bots-1000-340s-equal.json)
	cd $(GAME) && mix goblins.bench.inputs --rounds 3 --json ../../bench/results/inputs-19k-after.json
	cd $(GAME) && mix goblins.bench.persistence --zone-seconds 60 --rounds 10 --kills 400 --json ../../bench/results/persistence-10k-long.json
	cd $(GAME) && mix goblins.bench.persistence --zone-seconds 5 --rounds 2 --kills 400 --json ../../bench/results/persistence-10k-recovery.json
	cd $(GAME) && mix goblins.bench.persistence --zone-seconds 10 --rounds 30 --kills 50 --samples 5 --json ../../bench/results/persistence-10k-short-rounds.json
	cd $(GAME) && mix goblins.bench.persistence --zone-seconds 1 --rounds 1 --kills 400 --samples 2 --seconds 1 --json ../../bench/results/persistence-10k-recovery-parallel-scan.json
	cd $(GAME) && mix overworld.bench.capacity --server "ERL_FLAGS='$(ERL_SPIN)' mix goblins.server" --bots 0,250,500,750,1500 --seconds 30 --json ../../bench/results/capacity.json
	cd $(GAME) && mix overworld.bench.profile --serve "goblins.server --no-persist" --clients 0 --json ../../bench/results/profile-0.json
	cd $(GAME) && mix overworld.bench.profile --serve "goblins.server --no-persist" --clients 250 --json ../../bench/results/profile-250.json
	cd $(GAME) && mix overworld.bench.profile --serve "goblins.server --no-persist" --clients 500 --eprof Overworld.Transport.Conn --json ../../bench/results/profile-500.json
	cd $(GAME) && mix overworld.bench.profile --serve "goblins.server --no-persist" --clients 1000 --eprof Overworld.Zone.Bucket --json ../../bench/results/profile-1000.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 10000 --seconds 30 --rounds 2 --json ../../bench/results/world-2x2-10k.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 10000 --seconds 30 --rounds 2 --migrate 0.25 --json ../../bench/results/world-2x2-10k-migrate.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 5000 --seconds 30 --rounds 2 --migrate 0.25 --json ../../bench/results/world-2x2-5k-migrate.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 5000 --seconds 30 --rounds 2 --migrate 0.6 --json ../../bench/results/world-2x2-5k-migrate-60.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 5000 --seconds 30 --rounds 2 --migrate 1.0 --json ../../bench/results/world-2x2-5k-migrate-100.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 5000 --seconds 10 --warmup 3 --rounds 2 --observers 40 --json ../../bench/results/world-2x2-5k-observers.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 5000 --seconds 30 --rounds 2 --migrate 0.25 --json ../../bench/results/world-2x2-5k-migrate-shadows1.json
	cd $(GAME) && mix overworld.bench.world --zone Goblins --wire Goblins.Wire --zones 2x2 --entities-per-zone 5000 --seconds 30 --rounds 2 --migrate 0.25 --shadow-every 3 --max-speed 21 --json ../../bench/results/world-2x2-5k-migrate-shadows3.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --zones 4x3 --entities-per-zone 1000 --kills 20 --looters 200 --json ../../bench/results/cluster-recovery-4x3-1k.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --nodes 6 --zones 2x2 --entities-per-zone 1000 --kills 0 --probe-seconds 0 --sessions 100000 --players 500 --player-seconds 30 --json ../../bench/results/cluster-sessions-100k.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --nodes 6 --zones 2x2 --entities-per-zone 1000 --kills 0 --probe-seconds 0 --sessions 6 --players 500 --player-seconds 30 --json ../../bench/results/cluster-players-500-no-idle.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --nodes 3 --zones 2x2 --entities-per-zone 1000 --kills 0 --probe-seconds 0 --sessions 3 --players 500 --player-seconds 30 --json ../../bench/results/cluster-players-500-3-nodes.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --nodes 1 --zones 2x2 --entities-per-zone 1000 --kills 0 --probe-seconds 0 --sessions 1 --players 500 --player-seconds 30 --json ../../bench/results/cluster-players-500-1-node.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --nodes 3 --zones 2x2 --entities-per-zone 1000 --kills 0 --probe-seconds 0 --sessions 3 --players 250 --player-seconds 30 --json ../../bench/results/cluster-players-250-3-nodes.json
	cd $(GAME) && mix overworld.bench.cluster --zone Goblins --wire Goblins.Wire --nodes 1 --zones 2x2 --entities-per-zone 1000 --kills 0 --probe-seconds 0 --sessions 1 --players 250 --player-seconds 30 --json ../../bench/results/cluster-players-250-1-node.json
	$(call with_server_args,4100,--zones 2x2 --entities 2500 --players border --no-persist,$(call crossing,180,20,4100,75,bench/results/world-crossing,60))
	mix overworld.bench.backend --workload register --seconds 30 --json bench/results/backend-register.json
	mix overworld.bench.backend --workload register --seconds 30 --fsync-delay-ms 2 --json bench/results/backend-register-fsync-2ms.json
	mix overworld.bench.backend --workload login --seconds 30 --json bench/results/backend-login.json
	mix overworld.bench.backend --workload rpc-lua --seconds 30 --json bench/results/backend-rpc-lua.json
	mix overworld.bench.backend --workload rpc-elixir --seconds 30 --json bench/results/backend-rpc-elixir.json
	mix overworld.bench.backend --workload matches --handler echo_lua --players 1000,2000,3000,4000,5000 --seconds 20 --json bench/results/backend-matches-lua.json
	mix overworld.bench.backend --workload matches --handler echo --players 1000,2000,3000,4000,5000 --seconds 20 --json bench/results/backend-matches-elixir.json
	mix overworld.bench.backend --workload matches --handler echo_lua --players 1000 --seconds 10 --json bench/results/backend-matches-1000-echo_lua.json
	mix overworld.bench.backend --workload matches --handler echo --players 1000 --seconds 10 --json bench/results/backend-matches-1000-echo.json
	mix overworld.bench.backend --tsung bench/tsung/register.xml --json bench/results/backend-tsung-register.json
	mix overworld.bench.backend --tsung bench/tsung/login.xml --json bench/results/backend-tsung-login.json
	mix overworld.bench.backend --tsung bench/tsung/rpc.xml --json bench/results/backend-tsung-rpc.json
	mix overworld.bench.backend --tsung bench/tsung/matches.xml --json bench/results/backend-tsung-matches.json
	cd $(GAME) && mix goblins.bench.visualizer --json ../../bench/results/visualizer-fps-10k.json
	cd $(GAME) && mix goblins.bench.visualizer --zones 2x2 --json ../../bench/results/visualizer-fps-2x2-40k.json
	cd $(GAME) && mix goblins.bench.visualizer --observers 0,1,3 --rounds 3 --seconds 30 --json ../../bench/results/visualizer-observers-10k.json
	cd $(GAME) && mix goblins.bench.visualizer --zones 2x2 --observers 0,1 --rounds 2 --seconds 20 --json ../../bench/results/visualizer-observers-2x2-40k.json
	mix overworld.bench.backend --workload storage --storage embedded --json bench/results/backend-storage-embedded.json
	mix overworld.bench.backend --workload storage --storage postgres --json bench/results/backend-storage-postgres.json
	mix overworld.bench.backend --workload register --storage postgres --json bench/results/backend-register-postgres.json
	mix overworld.bench.backend --workload login --storage postgres --json bench/results/backend-login-postgres.json
	mix overworld.bench.backend --workload rpc-lua --storage postgres --json bench/results/backend-rpc-lua-postgres.json
	mix overworld.bench.backend --workload rpc-elixir --storage postgres --json bench/results/backend-rpc-elixir-postgres.json
	mix overworld.bench.backend --workload matches --handler echo_lua --storage postgres --players 3000,4000 --json bench/results/backend-matches-lua-postgres.json
	mix overworld.bench.backend --workload matches --handler echo_lua --players 3000,4000 --json bench/results/backend-matches-lua-embedded-3000-4000.json
	mix overworld.bench.metrics --json bench/results/metrics-scrape-20-zones.json
	mix overworld.bench.sidecar --paths 0 --json bench/results/sidecar.json
	mix overworld.bench.sidecar --bodies 10000,10000,10000,10000,10000,10000,10000,10000,10000,10000 --ticks 300 --kills 0 --paths 0 --json bench/results/sidecar-10k-runs.json
	mix overworld.bench.sidecar --bodies 500 --ticks 200 --kills 0 --paths 16 --json bench/results/sidecar-paths.json

clean:
	rm -rf _build $(GAME)/_build $(GAME)/reference/target sidecar/target clients/typescript/node_modules clients/typescript/dist
