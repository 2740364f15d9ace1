# dvtrun — everyday targets. `make help` lists them.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s
COUNT     ?= 6
# A package's tests end within TEST_TIMEOUT or fail saying which test hung
# (go test's panic lists the running tests). The slowest package,
# cmd/dvtrun, took 12 minutes on 2 cores shared with two dozen other busy
# processes: the bound leaves room for such a machine, no more.
TEST_TIMEOUT ?= 15m
# Tests that call t.Parallel run TEST_PARALLEL at a time per package: the
# process tests mostly wait (leases expiring, round trips), so more of them
# than the 2 cores overlap.
TEST_PARALLEL ?= 4
# TEST_LOG keeps make test's output; the time table is read from it.
TEST_LOG  ?= test.out
# PKG_TIME matches go test's "ok|FAIL <package> <seconds>s" lines, setting t.
PKG_TIME = ($$1 == "ok" || $$1 == "FAIL") && $$3 ~ /^[0-9.]+s$$/ && (t = substr($$3, 1, length($$3) - 1)) != ""
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT   ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

# The Temporal adapter's end-to-end tests run a real Temporal server in
# process; they live in a Go module of their own so that the server's
# dependencies stay out of dvtrun's.
E2E_TEMPORAL ?= engine/temporal/e2e

# make test pipes go test through tee: a failing go test must fail the
# recipe, so the recipes run in bash with pipefail.
SHELL       := bash
.SHELLFLAGS := -o pipefail -c

.PHONY: help build test test-main test-temporal test-times record-temporal-history test-short bench bench-smoke lint fuzz example docs temporal-dev clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/dvtrun
	$(GO) build -o bin/dvtrun ./cmd/dvtrun

test: ## run every test (what CI runs), the Temporal e2e module's too; ends with a time per package
	@start=$$(date +%s); rm -f $(TEST_LOG); status=0; \
	$(MAKE) --no-print-directory test-main 2>&1 | tee -a $(TEST_LOG) || status=1; \
	$(MAKE) --no-print-directory test-temporal 2>&1 | tee -a $(TEST_LOG) || status=1; \
	$(MAKE) --no-print-directory test-times; \
	echo "make test: $$(( $$(date +%s) - start ))s wall, $$([ $$status = 0 ] && echo ok || echo FAILED)"; \
	exit $$status

test-main: ## the tests of the main module
	$(GO) test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(PKGS)

test-temporal: ## the Temporal adapter against a real in-process Temporal server (first build: minutes)
	cd $(E2E_TEMPORAL) && $(GO) test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) ./...

test-times: ## the time per package of the last make test, slowest first (from $(TEST_LOG))
	@echo "--- time per package (the test binary's run; builds excluded), slowest first"
	@awk '$(PKG_TIME) { printf "%9.1fs  %-4s  %s\n", t, $$1, $$2 }' $(TEST_LOG) | sort -rn
	@awk '$(PKG_TIME) { sum += t; n++ } END { printf "%9.1fs  in all, %d packages\n", sum, n }' $(TEST_LOG)

# HISTORY names the file under engine/temporal/testdata/; keep the older
# ones: each is a release's workflow code the current one must replay.
HISTORY ?= shop-new.history.json
record-temporal-history: ## record the shop run's workflow history into engine/temporal/testdata/$(HISTORY) for the replay test
	cd $(E2E_TEMPORAL) && $(GO) test -count=1 -run 'TestShopOnTemporalMatchesLocal$$' . -args -record-history $(CURDIR)/engine/temporal/testdata/$(HISTORY)

test-short: ## the quick subset
	$(GO) test -count=1 -short $(PKGS)

bench: ## run the benchmarks, the Temporal module's too, and print medians of $(COUNT) runs (benchstat needs 6 for a confidence interval)
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count $(COUNT) -timeout 60m $(PKGS) | tee bench.out
	cd $(E2E_TEMPORAL) && $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count $(COUNT) -timeout 60m ./... | tee -a $(CURDIR)/bench.out
	$(GO) run $(BENCHSTAT) bench.out

bench-smoke: ## run every benchmark once (-benchtime 1x), the Temporal module's too: CI's check that none rots
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout $(TEST_TIMEOUT) $(PKGS)
	cd $(E2E_TEMPORAL) && $(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout $(TEST_TIMEOUT) ./...

lint: ## gofmt, go mod tidy, go vet, staticcheck
	@test -z "$$(gofmt -l .)" || (gofmt -l .; echo "gofmt: files above need formatting"; exit 1)
	@$(GO) mod tidy -diff >/dev/null || (echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1)
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

fuzz: ## run each fuzz target for 20s
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s $$pkg || exit 1; \
	  done; \
	done

example: ## run the example plan on the embedded SQLite default
	$(GO) run ./cmd/dvtrun run plans/shop/plan.yaml

docs: ## regenerate docs/reference/cli.md and config.md from the command definitions and config types
	$(GO) build -o bin/dvtrun ./cmd/dvtrun
	bin/dvtrun help --markdown > docs/reference/cli.md
	bin/dvtrun help config > docs/reference/config.md

temporal-dev: ## serve an in-process Temporal server on 127.0.0.1:7233 (namespace default) until interrupted
	cd $(E2E_TEMPORAL) && $(GO) run ./cmd/temporal-dev

clean: ## remove build output and the local state in .dvt/
	rm -rf bin .dvt bench.out $(TEST_LOG)
