# Umpire: `make run` serves the API locally, `make test` runs every test.
# Builds share a target directory outside the clone so CI and fresh clones reuse it.

SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/umpire/target
export CARGO_TERM_COLOR ?= never

CACHE   := $(CURDIR)/.cache
VENV    := $(CACHE)/venv
PY      := $(VENV)/bin/python
PY_DEPS := $(VENV)/.installed-v5
# anvil, solcjs + OpenZeppelin, viem, the reference x402 clients/facilitator, the MCP
# TypeScript SDK and playwright-core, pinned by package-lock.json, in ./node_modules (ignored).
NODE_DEPS := node_modules/.installed-v1
UMPIRE  := $(CARGO_TARGET_DIR)/debug/umpire
# The hostile-input tests hold the `umpire` binary's release build (the `fast` profile) to
# its CPU budget per request.
UMPIRE_RELEASE := $(CARGO_TARGET_DIR)/fast/umpire
ADDR    ?= 127.0.0.1:8080

.PHONY: run build check test test-alone test-lambda test-lambda-run sam-build watch lint fmt bench fuzz lambda-build lambda-smoke deploy devnet clean help

help:
	@echo "make run           serve the API on $(ADDR) (state in ~/.local/share/umpire)"
	@echo "make devnet        a local chain (anvil + test USDC) and the API selling on it (BLOCK_TIME=2: Base's blocks)"
	@echo "make check         fmt, clippy and the unit tests: a few minutes, before every commit"
	@echo "make test          install test tools into .cache/ and node_modules/, lint, run every test"
	@echo "make bench         benchmarks in one run: signing, judging, x402 verify vs TypeScript, vs the Python recipe"
	@echo "make fuzz          every cargo fuzz target for FUZZ_SECONDS (default 60) each, then the corpus vs Python"
	@echo "make lambda-build  build every Lambda for arm64 with cargo-lambda, print bootstrap sizes"
	@echo "make lambda-smoke  run the arm64 bootstraps' first events under qemu-user (after lambda-build)"
	@echo "make watch         the Lambda functions under cargo lambda watch on port 9000, local AWS"
	@echo "make test-lambda   a paid verdict through cargo lambda watch, and make deploy's sam build of one function"
	@echo "make deploy        sam build && sam deploy --guided"

run:
	cargo run -p umpire-cli --bin umpire -- serve --addr $(ADDR)

build:
	cargo build --workspace --bins

# Python with the packages the tests use, in an ignored folder: `cryptography` for the
# contract's recipe, cfn-lint and aws-sam-cli for template.yaml (both validate offline),
# moto's server as the local DynamoDB/SQS/KMS the storage tests run against,
# schemathesis to fuzz `umpire serve` from its OpenAPI description, and x402's Python
# SDK with its MCP client (x402.mcp; mcp 1.x, the SDK's wrapper passes timedeltas that
# mcp 2 refuses) for the paid MCP tools.
# SAM CLI and cfn-lint pinned: the template's tests read SAM's own code (its transform,
# its guided prompts), and a new lint rule must not fail a run by itself.
SAM_CLI := aws-sam-cli==1.170.0
CFN_LINT := cfn-lint==1.58.0
$(PY_DEPS):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check cryptography $(CFN_LINT) 'moto[server]' $(SAM_CLI) schemathesis \
	  'x402[evm,mcp]==2.25.0' 'mcp>=1.9,<2'
	touch $@

# Headless Chromium for the verification page's browser test: Debian's package
# (playwright-core from npm drives it; no browser download).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	$(if $(filter 0,$(shell id -u)),,sudo) sh -c 'apt-get install -y --no-install-recommends chromium || (apt-get update && apt-get install -y --no-install-recommends chromium)'

$(NODE_DEPS): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# BLOCK_TIME=2 makes a block every two seconds, as Base does (default: at once).
BLOCK_TIME ?= 0
devnet: $(NODE_DEPS)
	cargo build -p umpire-cli
	node infra/devnet/devnet.mjs --umpire $(UMPIRE) --addr $(ADDR) --block-time $(BLOCK_TIME)

# nextest runs every test binary side by side (.config/nextest.toml); `cargo test` would
# run the binaries one after another, each waiting on its slowest test.
NEXTEST := $(shell command -v cargo-nextest 2>/dev/null || echo $(HOME)/.cargo/bin/cargo-nextest)
$(NEXTEST):
	cargo install cargo-nextest --locked

# What every run of `make test` builds and tests, in one feature resolution: the bins
# with the test targets, so dev-dependencies' features are on for both and the
# dependencies are compiled once, not once per selection. The sub-runs select their
# tests with a filter, never with -p (a narrower selection resolves features anew and
# rebuilds half the workspace). The `umpire` the tests start takes the test switches
# (umpire-cli's feature: only that crate is built twice); the functions' bins and the
# test harnesses are built as nextest builds them, without.
TEST_BUILD = --workspace --lib --bins --tests

LINT = cargo fmt --all -- --check && cargo clippy --workspace --all-targets --quiet -- -D warnings

# Before every commit: formatting, lints and the unit tests (no servers needed).
check: $(NEXTEST)
	$(LINT)
	cargo nextest run --workspace --lib --bins --no-fail-fast --cargo-quiet

# Lints first, so a lint failure costs seconds. Three sub-runs (main: every test; alone:
# the tests that need a moto of their own; lambda: cargo lambda watch's), each leaving
# its log and exit status in .cache/test-<run>.{log,status}; infra/local/test_summary.py
# judges each on its own (no summary, a non-zero status, failed, timed-out or
# exec-failed tests: that run fails), prints a line per run and, last, the plain total
# CI reads ("N passed, N failed"), and decides the exit status.
# A test that cannot run its scenario fails unless named here; named only where the
# tool it needs is known missing on this machine (the summary lists each skip taken).
ALLOWED_SKIPS = $(shell unshare --net --mount --fork true 2>/dev/null || echo dns_black_hole)
test: $(PY_DEPS) $(NODE_DEPS) $(CHROMIUM) $(NEXTEST) $(VENV)/bin/cargo-lambda
	$(LINT)
	$(VENV)/bin/cfn-lint template.yaml
	SAM_CLI_TELEMETRY=0 $(VENV)/bin/sam validate --lint --region us-east-1 -t template.yaml
	cargo build $(TEST_BUILD) --features umpire-cli/test-switches --quiet
	# One invocation, so the two binaries share one build of their dependencies.
	cargo build --profile fast -p umpire-cli -p umpire-functions --bin umpire --bin verdicts --quiet
	@rm -f $(CACHE)/test-*.log $(CACHE)/test-*.status $(CACHE)/test-skips.txt $(CACHE)/test-measures.txt
	set -o pipefail; UMPIRE_PYTHON=$(PY) UMPIRE_BIN=$(UMPIRE) UMPIRE_RELEASE_BIN=$(UMPIRE_RELEASE) \
	  UMPIRE_RELEASE_FUNCTIONS_DIR=$(CARGO_TARGET_DIR)/fast \
	  UMPIRE_SKIPS_FILE=$(CACHE)/test-skips.txt UMPIRE_ALLOWED_SKIPS=$(ALLOWED_SKIPS) \
	  UMPIRE_MEASURES_FILE=$(CACHE)/test-measures.txt \
	  infra/local/with-moto.sh $(VENV) \
	  cargo nextest run $(TEST_BUILD) --no-fail-fast --cargo-quiet 2>&1 \
	  | tee $(CACHE)/test-main.log; echo $$? > $(CACHE)/test-main.status
	set -o pipefail; $(MAKE) --no-print-directory test-alone 2>&1 | tee $(CACHE)/test-alone.log; \
	  echo $$? > $(CACHE)/test-alone.status
	set -o pipefail; $(MAKE) --no-print-directory test-lambda-run 2>&1 | tee $(CACHE)/test-lambda.log; \
	  echo $$? > $(CACHE)/test-lambda.status
	@$(PY) infra/local/test_summary.py $(CACHE) main alone lambda

lint:
	$(LINT)

fmt:
	cargo fmt --all

# One run, every figure: criterion (Rust), the reference TypeScript verifier and the
# contract's Python recipe on the same inputs, as ratios, and wrk (Debian) against a
# release `umpire serve`, and the paid path: 1,000 basic purchases from `umpire serve`
# (self-settled) vs the reference @x402/express stack with the reference facilitator vs
# anvil's own transfer round trip, each on a fresh anvil (bench/report.py).
# Cold starts are measured on x86_64 release builds of these functions (the shipped
# ones are arm64: `make lambda-build`), each answering its first event through a local
# Runtime API (bench/cold_start.py). The hostile-load test holds /healthz's p99 to 100 ms
# against the release server while 100 paid hostile checks run; the hostile-input load
# holds it to 50 ms with eight hostile bodies always in flight before payment.
BENCH_DIR := $(CACHE)/bench
BENCH_FUNCTIONS := health key validate verdicts checker worker
bench: build $(PY_DEPS) $(NODE_DEPS)
	command -v wrk >/dev/null || $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y --no-install-recommends wrk
	cargo build --profile fast -p umpire-cli
	cargo build --release -p umpire-functions $(addprefix --bin ,$(BENCH_FUNCTIONS))
	UMPIRE_BENCH_DIR=$(BENCH_DIR) UMPIRE_BIN=$(UMPIRE_RELEASE) \
	  UMPIRE_LAMBDA_WORKER_BIN=$(CARGO_TARGET_DIR)/release/checker \
	  cargo bench --profile fast -p umpire-core -p umpire-checker -p umpire-x402
	set -o pipefail; UMPIRE_BIN=$(UMPIRE_RELEASE) UMPIRE_PYTHON=$(PY) UMPIRE_HEALTH_P99_MS=100 \
	  cargo test -p umpire-blackbox --test load hostile -- --nocapture 2>&1 | grep -E "hostile load:|test result"
	set -o pipefail; UMPIRE_RELEASE_BIN=$(UMPIRE_RELEASE) UMPIRE_HOSTILE_INPUT_P99_MS=50 \
	  cargo test -p umpire-blackbox --test hostile_input -- --nocapture 2>&1 | grep -E "hostile input load|test result"
	set -o pipefail; infra/local/with-moto.sh $(VENV) cargo test --profile fast -p umpire-functions \
	  --test reputation_exact report_cost -- --ignored --nocapture 2>&1 | grep -E "reputation bench|test result"
	UMPIRE_BIN=$(UMPIRE_RELEASE) UMPIRE_FUNCTIONS_DIR=$(CARGO_TARGET_DIR)/release \
	  $(PY) bench/report.py $(CARGO_TARGET_DIR)/criterion $(BENCH_DIR)

# libFuzzer targets (fuzz/, its own workspace, nightly for the sanitizer flags). A crash
# stops the run and leaves its input in fuzz/artifacts/<target>/; make it a regression test.
FUZZ_SECONDS ?= 60
# The nightly the targets were last run with: rustc 1.97.0-nightly (e50aa6fba 2026-05-19).
# rustup names an installed nightly "nightly"; set FUZZ_TOOLCHAIN=nightly-YYYY-MM-DD to pin.
FUZZ_TOOLCHAIN ?= nightly
FUZZ_TARGETS := spec stable_json payment_header json_path url_policy feedback_body guard
# guard asserts a time budget per input, so it runs optimized without a sanitizer or
# debug assertions (-O -s none: timings near a release build's), with long inputs from
# the start (costs grow with the pattern); the others run under AddressSanitizer with
# debug assertions.
fuzz: $(PY_DEPS)
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	rustc +$(FUZZ_TOOLCHAIN) --version
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; \
	  if [ $$t = guard ]; then flags="-O -s none"; extra=-len_control=0; else flags="-s address"; extra=; fi; \
	  CARGO_TARGET_DIR=$(HOME)/.cache/umpire/fuzz-target cargo +$(FUZZ_TOOLCHAIN) fuzz run $$flags $$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 $$extra || exit 1; done
	UMPIRE_PYTHON=$(PY) UMPIRE_FUZZ_CORPUS=$(CURDIR)/fuzz/corpus/stable_json \
	  cargo test -p umpire-core --test canonical fuzz_corpus_agrees_with_python -- --ignored --nocapture

# cargo-lambda from PyPI brings zig for cross-compiling to arm64.
$(VENV)/bin/cargo-lambda: $(PY_DEPS)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check cargo-lambda

# Every function for arm64 (Graviton), release profile (opt-level "z", fat LTO, one
# codegen unit, panic=abort, stripped; cargo-lambda's own release settings, thin LTO among
# them, are switched off in functions/Cargo.toml so that `sam build` builds the same), no
# unwind tables (functions/build.rs), then each bootstrap's size against the 8 MB target.
# rustup fetches the arm64 standard library once.
BOOTSTRAP_MAX_BYTES := 8000000
lambda-build: $(VENV)/bin/cargo-lambda
	rustup target add aarch64-unknown-linux-gnu
	PATH=$(VENV)/bin:$$PATH cargo lambda build --release --arm64 -p umpire-functions
	@echo "bootstrap sizes (bytes):"
	@for f in $(CARGO_TARGET_DIR)/lambda/*/bootstrap; do size=$$(stat -c %s $$f); \
	  printf "  %-12s %10d%s\n" "$$(basename $$(dirname $$f))" $$size \
	    "$$( [ $$size -le $(BOOTSTRAP_MAX_BYTES) ] || echo '  over 8 MB')"; done

WATCH_PORT ?= 9000
# The shipped arm64 bootstraps answering their first events (bench/cold_start.py) under
# qemu-user, Debian's qemu-user with binfmt_misc for aarch64 (the verdicts function starts
# its checker as an arm64 child process); timings under emulation mean nothing.
ARM_SMOKE_DIR := $(CACHE)/arm64-smoke
lambda-smoke: $(PY_DEPS)
	@test -e /proc/sys/fs/binfmt_misc/qemu-aarch64 || { echo "needs qemu-user with binfmt_misc for aarch64 (apt-get install qemu-user libc6-arm64-cross)"; exit 1; }
	mkdir -p $(ARM_SMOKE_DIR)
	for f in $(BENCH_FUNCTIONS); do cp $(CARGO_TARGET_DIR)/lambda/$$f/bootstrap $(ARM_SMOKE_DIR)/$$f; done
	QEMU_LD_PREFIX=/usr/aarch64-linux-gnu infra/local/with-moto.sh $(VENV) $(PY) bench/cold_start.py $(ARM_SMOKE_DIR)

watch: $(VENV)/bin/cargo-lambda
	infra/local/watch.sh $(VENV) $(WATCH_PORT)

# The functions under cargo lambda watch, and `make deploy`'s sam build of one function
# (each builds its own way, so after the other tests rather than beside them, one at a
# time): `make test` runs them last.
test-lambda: $(VENV)/bin/cargo-lambda $(NODE_DEPS) build test-lambda-run
# Tests too heavy for the shared moto: each alone, on a moto of its own (100,000 feedback
# rows; moto answers one request at a time, and a 1 MB page takes it seconds).
test-alone:
	set -o pipefail; infra/local/with-moto.sh $(VENV) \
	  cargo nextest run $(TEST_BUILD) --run-ignored ignored-only \
	  -E 'binary(reputation_exact) & test(twenty_thousand)' --no-fail-fast --cargo-quiet

test-lambda-run:
	set -o pipefail; UMPIRE_PYTHON=$(PY) UMPIRE_BIN=$(UMPIRE) \
	  cargo nextest run $(TEST_BUILD) -E 'binary(lambda_watch) | binary(sam_build)' --run-ignored ignored-only \
	  --test-threads 1 --no-fail-fast --cargo-quiet

# rust-cargolambda builds are a SAM beta feature; cargo-lambda must be on PATH.
SAM_CONFIG := --config-file infra/samconfig.toml
# SAM_BUILD_ARGS: more for sam build (a test builds one function into a folder of its own).
# Every deploy publishes new versions behind the aliases, parameters-only deploys
# included (infra/deploy_revision.py marks each build as new).
# DEPLOY_PARAMS: parameter values offered as the guided prompts' defaults (what
# `umpire keygen` prints: ParameterKey=...,ParameterValue=... pairs). The stack's state
# decides TableDeletionProtection (infra/stack_state.py: off for a first create, so a
# failed one leaves nothing behind). The `umpire` binary (keygen, verify) is built too:
# its path is printed last.
# The guided deploy saves the operator's answers (stack name, region, parameters) to
# DEPLOY_CONFIG, an ignored copy of the tracked config made on the first deploy: the
# repository never holds a deployment's settings.
DEPLOY_CONFIG := infra/samconfig.local.toml
$(DEPLOY_CONFIG):
	cp infra/samconfig.toml $@
deploy: sam-build | $(DEPLOY_CONFIG)
	cargo build --profile fast -p umpire-cli --bin umpire --quiet
	$(PY) infra/deploy_revision.py .aws-sam/build
	state=$$($(PY) infra/stack_state.py --config $(DEPLOY_CONFIG)) && \
	  PATH=$(VENV)/bin:$$PATH sam deploy --guided --config-file $(DEPLOY_CONFIG) \
	  --parameter-overrides "$$state $(DEPLOY_PARAMS)"
	@echo "umpire (keygen, verify): $(UMPIRE_RELEASE)"
sam-build: $(VENV)/bin/cargo-lambda
	rustup target add aarch64-unknown-linux-gnu
	PATH=$(VENV)/bin:$$PATH sam build $(SAM_CONFIG) $(SAM_BUILD_ARGS)

clean:
	rm -rf $(CACHE) node_modules
