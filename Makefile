# Spillway developer tasks. `make` (or `make help`) lists them.
# Everything here is plain `go` commands; read a target to see what CI runs.

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go

# Extra flags for `go test` in test/race/cover, e.g. GOTESTFLAGS='-run TestFoo -v'.
GOTESTFLAGS ?=

# Benchmarks: BENCH_ARGS replaces the flags, BENCH_PKGS the packages, e.g.
#   make bench BENCH_ARGS="-run '^$$' -bench Leaky -benchmem -count 10"
BENCH_ARGS ?= -run '^$$' -bench . -benchmem -count 5
BENCH_PKGS ?= ./pkg/... ./bench/...

# How long each fuzz target runs in `make fuzz`; FUZZ_PKGS is where targets are looked for.
FUZZTIME ?= 10m
FUZZ_PKGS ?= ./pkg/... ./internal/...
# Each fuzz target's run inside `make test` (CI): 3 s, enough to exercise the fuzz engine
# on every target (every target's seed corpus already runs as a unit test): the fuzz step
# takes about 2 minutes of the default run once the packages instrumented for fuzzing are in
# the build cache (their first build, on an empty cache, took over 10 minutes of a loaded
# 2-core machine); `make fuzz-short` (30 s) and `make fuzz` (10 minutes a target) are the
# real fuzzing.
# scripts/fuzz tells Go 1.26's spurious "context deadline exceeded" at the
# end of a clean duration run (golang/go#75804) from a real failure.
CI_FUZZTIME ?= 3s

# golangci-lint v2, pinned; `go run` builds it from the Go module proxy on first use and
# keeps the executable in the Go build cache (Go >= 1.24), so later runs start at once.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# The nats CLI that examples/cli/nats-submit.sh runs in `make examples`: built
# from the Go module proxy into bin/nats (its first build takes minutes of CPU).
NATSCLI_VERSION ?= v0.5.0

COVERPROFILE ?= coverage.out

KILLS ?= 100

.PHONY: help deps test examples natscli race bench fuzz fuzz-short kill-test reliability netns soak drain-depth ui-test prom-test lint cover tidy

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "; printf "Usage: make <target> [VAR=value]\n\nTargets:\n"} \
		/^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@printf '\nVariables: GOTESTFLAGS BENCH_ARGS BENCH_PKGS FUZZTIME FUZZ_PKGS GOLANGCI_LINT_VERSION\n'

deps: ## Install the Debian packages the tests need when missing (scripts/deps; root or sudo -n; no-op when all present)
	scripts/deps

# The race tests list test/e2e first: it is the longest package (about 7 minutes, its tests
# mostly one after another), so it starts at once and the rest share the other core meanwhile.
# `go vet` is not a step of its own: lint runs govet with every analyzer enabled.
test: deps natscli ## What CI runs: deps, the nats CLI, lint (govet included), race tests of pkg/ internal/ test/ bench/, the commands and examples, a short fuzz of every target
	@$(MAKE) --no-print-directory lint
	$(GO) test -count=1 -race $(GOTESTFLAGS) ./test/e2e/ ./pkg/... ./internal/... ./test/... ./bench/...
	$(GO) test -count=1 $(GOTESTFLAGS) ./cmd/... ./examples/...
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(CI_FUZZTIME)

examples: deps natscli ## Every example of examples/ against a dev-mode admitter, the nats CLI one included
	$(GO) test -count=1 -v $(GOTESTFLAGS) ./examples/...

natscli: ## Build the nats CLI (NATSCLI_VERSION) into bin/nats unless it is there
	@if [ "$$(bin/nats --version 2>/dev/null)" != "$(NATSCLI_VERSION)" ]; then \
		echo "building the nats CLI $(NATSCLI_VERSION) into bin/ (minutes the first time)"; \
		GOBIN=$(CURDIR)/bin $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION); \
	fi

race: ## Every package under the race detector
	$(GO) test -race $(GOTESTFLAGS) ./...

bench: ## Benchmarks of pkg/ and bench/bucketbench (override BENCH_ARGS, BENCH_PKGS)
	$(GO) test $(BENCH_ARGS) $(BENCH_PKGS)

fuzz: ## Run every Fuzz* target in FUZZ_PKGS for FUZZTIME each (default 10m), one after another
	GO=$(GO) scripts/fuzz $(FUZZTIME) $(FUZZ_PKGS)

fuzz-short: ## Same as fuzz with FUZZTIME=30s
	@$(MAKE) --no-print-directory fuzz FUZZTIME=30s

kill-test: ## kill -9 a worker process mid-job KILLS times (default 100; CI runs 20)
	SPILLWAY_KILLS=$(KILLS) $(GO) test -count=1 -race -v -run '^TestKillWorkerLosesNothing$$' -timeout 30m ./pkg/queue/worker/

reliability: ## The fault and bad-input suite at full length; `make test` runs its short version. Figures: reliability.log
	@set -o pipefail; SPILLWAY_RELIABILITY=full $(GO) test -count=1 -v -run '^TestReliability' -timeout 90m ./pkg/... ./internal/... ./test/... 2>&1 | tee reliability.log
	@echo; echo "figures (docs/reliability.md):"; grep -h 'figure:' reliability.log | sed 's/^ *//'

netns: ## Partitions between network namespaces (root, iproute2): Redis cut from admitters, a NATS cluster node cut off, under load. Figures: netns.log
	@set -o pipefail; SPILLWAY_NETNS=1 $(GO) test -count=1 -v -run '^TestReliabilityNetns' -timeout 30m ./test/netns/ 2>&1 | tee netns.log
	@echo; echo "figures (docs/scaling.md):"; grep -h 'figure:' netns.log | sed 's/^ *//'

drain-depth: ## The drain's cost with 1,000,000 waiting jobs over 10,000 keys, 2 workers (SPILLWAY_DRAIN_DEPTH=JOBSxKEYS). Figures: drain-depth.log
	@set -o pipefail; SPILLWAY_DRAIN_DEPTH=$${SPILLWAY_DRAIN_DEPTH:-1000000x10000} SPILLWAY_RELIABILITY=full $(GO) test -count=1 -v -run '^TestDrainCostIsBoundedByKeys$$' -timeout 60m ./test/e2e/ 2>&1 | tee drain-depth.log
	@echo; echo "figures:"; grep -h 'figure:' drain-depth.log | sed 's/^ *//'

soak: ## Soak: SPILLWAY_SOAK (default 30m) at 70% of the measured admission capacity. Figures: soak.log
	@set -o pipefail; SPILLWAY_SOAK=$${SPILLWAY_SOAK:-30m} $(GO) test -count=1 -v -run '^TestReliabilitySoak$$' -timeout 90m ./test/e2e/ 2>&1 | tee soak.log
	@echo; echo "figures (docs/reliability.md):"; grep -h 'figure:' soak.log | sed 's/^ *//'

ui-test: deps ## The /ui page in headless Chromium (Debian's chromium); screenshots kept in artifacts/ui
	SPILLWAY_ARTIFACTS=$(CURDIR)/artifacts/ui $(GO) test -count=1 -v -run 'TestPage' ./internal/ui/

prom-test: deps ## Debian's Prometheus against admitters under load: dashboard queries, alert rules, promtool
	$(GO) test -count=1 -v -run 'TestRealPrometheus|TestNoDeadPanels|TestNATSExporterSource|TestPromtool' ./test/monitoring/

lint: ## golangci-lint v2 (pinned: GOLANGCI_LINT_VERSION) with .golangci.yml
	$(GOLANGCI_LINT) run ./...

cover: ## Tests with coverage; writes $(COVERPROFILE) and prints the total
	$(GO) test -count=1 -covermode=atomic -coverprofile=$(COVERPROFILE) $(GOTESTFLAGS) ./...
	@$(GO) tool cover -func=$(COVERPROFILE) | tail -n 1
	@echo "HTML report: go tool cover -html=$(COVERPROFILE)"

tidy: ## go mod tidy, then check that go.mod and go.sum are consistent
	$(GO) mod tidy
	$(GO) mod verify
