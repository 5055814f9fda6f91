# The two commands a new user needs: `make demo` and `make test`.
GO ?= go

.PHONY: test demo example bench bench-fleet bench-verify install-deps fuzz vet floor staticcheck redis-server

# staticcheck runs through `go run` at a pinned version, so that a fresh
# machine needs only the Go toolchain; v0.8 reads Go 1.26 code.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The Graph example is a module of its own, so that msgraph-sdk-go never
# enters the library's dependencies; its tests run without -race, which
# would compile msgraph-sdk-go a second time, and take minutes on 2 cores.
test: install-deps vet staticcheck floor redis-server
	$(GO) test -race -count=1 ./...
	cd examples/graph && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) test -count=1 ./...
	cd redisstore && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) test -race -count=1 ./...

# The Redis store is a module of its own, so that go-redis never enters the
# library's dependencies; its tests start a real redis-server (Debian's
# package, installed here when missing) on a free loopback port.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y redis-server; }

# msgraph-sdk-go's GraphServiceClient on graph.NewClient against a throttling server.
example:
	cd examples/graph && $(GO) run .

# A consumer declaring the oldest supported Go release keeps its go directive.
floor:
	./scripts/check-floor.sh

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run $(STATICCHECK) ./...

# Flags through ARGS, e.g. make demo ARGS="-queue=false -n 1000".
# make demo ARGS=-fleet=4 shows four OS processes sharing one budget, without
# and with the Redis store; it runs from the bench's module, which has
# redisstore, and needs redis-server (make redis-server installs it).
demo:
ifneq ($(findstring -fleet,$(ARGS)),)
	cd bench && $(GO) run . $(subst -fleet=,-fleet-demo=,$(ARGS))
else
	$(GO) run ./cmd/demo $(ARGS)
endif

# The benchmark, about 95 minutes on 2 cores: the fleet rows of
# RESULTS-fleet.md (~7 min), the scenarios of RESULTS.md (~50 min), then
# those behind real nginx and HAProxy and the bench's own buckets, in
# RESULTS-real.md (~35 min). To fit, the latter run for ours and
# kiota-http-go's handler (the do-no-harm reference) on BENCH_WORKLOADS, the
# workloads the throttle issue is judged on (ids of users and of mailboxes
# spread over 50 and over n), and for the other peers on user/n alone;
# every shape and spread (user, mailbox, collection, drive × 1, 50, n)
# takes about 60 minutes more: make bench BENCH_WORKLOADS=all.
# One scenario quickly, e.g.
#   cd bench && go run . -scenarios nginx-ra -clients ours -workloads mailbox/50 -methods GET
BENCH_WORKLOADS ?= user/n,user/50,mailbox/50,mailbox/n,collection
bench: install-deps bench-fleet
	cd bench && $(GO) run . -out . -scenarios plain
	cd bench && $(GO) run . -out . -scenarios real -clients ours,kiota,retryablehttp,failsafe \
		-full-clients ours,kiota -peer-workload user/n \
		$(if $(filter all,$(BENCH_WORKLOADS)),,-workloads $(BENCH_WORKLOADS))

# The fleet bench, about 7 minutes: 1 to 20 OS processes, each with its own
# handler, sharing one redis-server the bench starts, against the bench's
# token bucket and behind a real nginx, into RESULTS-fleet.md.
bench-fleet: install-deps redis-server
	cd bench && $(GO) run . -out . -fleet all

# throttletest's models of nginx limit_req and HAProxy's stick table against
# the real limiters, the same send times through both.
bench-verify: install-deps
	cd bench && $(GO) run . -verify

# nginx (limit_req) and HAProxy from Debian's packages, for the tests and
# scenarios behind real limiters; installed only when missing (nginx-light
# where the release still has it, else nginx), as root or through sudo -n.
# Where they cannot be installed those tests skip, except under CI=true.
install-deps:
	@missing=""; \
	for b in nginx haproxy; do \
		command -v $$b >/dev/null 2>&1 || [ -x /usr/sbin/$$b ] || missing="$$missing $$b"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing from Debian's packages"; \
		sudo=""; [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null || sudo="sudo -n"; \
		{ $$sudo apt-get update -qq && \
		  { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light haproxy >/dev/null || \
		    $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx haproxy >/dev/null; }; } || \
		{ echo "could not install$$missing: the tests behind real limiters will skip"; [ "$$CI" != true ]; }; \
	fi

# Each fuzz target for FUZZTIME (default 1m), one after another; `make test`
# only replays their seed corpora (testdata/fuzz in each package).
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzRetryAfter$$' -fuzztime=$(FUZZTIME) ./middleware
	$(GO) test -run='^$$' -fuzz='^FuzzRetryDelay$$' -fuzztime=$(FUZZTIME) ./middleware
	$(GO) test -run='^$$' -fuzz='^FuzzBatchItemHeaders$$' -fuzztime=$(FUZZTIME) ./middleware
	$(GO) test -run='^$$' -fuzz='^FuzzValidate$$' -fuzztime=$(FUZZTIME) ./options
	$(GO) test -run='^$$' -fuzz='^FuzzCompleter$$' -fuzztime=$(FUZZTIME) ./internal/batch
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./internal/ratelimit
