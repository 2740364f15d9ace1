# dvtrun — everyday targets. `make help` lists them.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s
COUNT     ?= 6
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT   ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

# The Temporal adapter's end-to-end tests run a real Temporal server in
# process; they live in a Go module of their own so that the server's
# dependencies stay out of dvtrun's.
E2E_TEMPORAL ?= engine/temporal/e2e

.PHONY: help build test test-temporal record-temporal-history test-short bench lint fuzz example docs temporal-dev clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/dvtrun
	$(GO) build -o bin/dvtrun ./cmd/dvtrun

test: ## run every test (what CI runs), the Temporal e2e module's too
	$(GO) test -count=1 -timeout 45m $(PKGS)
	$(MAKE) test-temporal

test-temporal: ## the Temporal adapter against a real in-process Temporal server (first build: minutes)
	cd $(E2E_TEMPORAL) && $(GO) test -count=1 -timeout 30m ./...

# HISTORY names the file under engine/temporal/testdata/; keep the older
# ones: each is a release's workflow code the current one must replay.
HISTORY ?= shop-new.history.json
record-temporal-history: ## record the shop run's workflow history into engine/temporal/testdata/$(HISTORY) for the replay test
	cd $(E2E_TEMPORAL) && $(GO) test -count=1 -run 'TestShopOnTemporalMatchesLocal$$' . -args -record-history $(CURDIR)/engine/temporal/testdata/$(HISTORY)

test-short: ## the quick subset
	$(GO) test -count=1 -short $(PKGS)

bench: ## run the benchmarks and print medians of $(COUNT) runs (benchstat needs 6 for a confidence interval)
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count $(COUNT) -timeout 60m $(PKGS) | tee bench.out
	$(GO) run $(BENCHSTAT) bench.out

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
	rm -rf bin .dvt bench.out
