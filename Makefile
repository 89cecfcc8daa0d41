# Entry points for people and CI. `make help` lists them.

TRIALS ?= 1000
TTL ?= 2s
GRACE ?= 2s
CHAOS_REPORT ?= chaos-report.txt

.PHONY: help test chaos chaos-short release deb image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## the project's test command: private servers, vet, staticcheck, gofmt, go test -race
	./scripts/test

# The release files (release/, a module of its own): the same commit gives the same bytes. VERSION
# (default: the v* tag at HEAD, else the commit's Go pseudo-version) and SOURCE_DATE_EPOCH (default:
# the commit's time) override the stamp. dist/SHA256SUMS covers whatever dist/ holds.
ARCH ?= $(shell go env GOARCH)

release: ## static binaries for linux/amd64, linux/arm64, darwin/arm64 in dist/, stamped, with dist/SHA256SUMS
	cd release && go run . -out ../dist binaries

deb: ## the Debian package dist/once_VERSION_ARCH.deb (ARCH=amd64 or arm64, default this machine's)
	cd release && go run . -out ../dist -arch $(ARCH) deb

image: ## the container image dist/once-image.tar (OCI layout, linux/amd64 + linux/arm64), no Docker daemon
	cd release && go run . -out ../dist image

chaos: ## long fault-injection run on every store: TRIALS per store (default 1000), figures in $(CHAOS_REPORT)
	rm -f $(CHAOS_REPORT)
	ONCE_TEST_REQUIRE=$${ONCE_TEST_REQUIRE:-all} ./scripts/with-servers sh -c '\
	  go test ./internal/chaos -run "^TestChaos$$" -parallel 8 -trials=$(TRIALS) -ttl=$(TTL) -grace=$(GRACE) -timeout 0 -count=1 -v -report=$(CURDIR)/$(CHAOS_REPORT) && \
	  go test ./internal/chaos -run "^TestRestartStoreChaos$$" -parallel 8 -trials=$(TRIALS) -ttl=$(TTL) -grace=$(GRACE) -timeout 0 -count=1 -v -report=$(CURDIR)/$(CHAOS_REPORT)'
	@cat $(CHAOS_REPORT)

chaos-short: ## the bounded chaos run of the test command (a few trials per fault per store, < 3 minutes)
	ONCE_TEST_REQUIRE=$${ONCE_TEST_REQUIRE:-all} ./scripts/with-servers sh -c '\
	  go test ./internal/chaos -count=1 -v -skip "^TestRestart" && \
	  go test ./internal/chaos -count=1 -v -run "^TestRestart"'
