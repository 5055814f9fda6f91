# The two commands a new user needs: `make demo` and `make test`.
GO ?= go

.PHONY: test demo bench fuzz vet

test: vet
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

demo:
	$(GO) run ./cmd/demo

bench:
	cd bench && $(GO) run . -out .

# Each fuzz target for FUZZTIME (default 1m), one after another; `make test`
# only replays their seed corpora (testdata/fuzz in each package).
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzRetryAfter$$' -fuzztime=$(FUZZTIME) ./middleware
	$(GO) test -run='^$$' -fuzz='^FuzzRetryDelay$$' -fuzztime=$(FUZZTIME) ./middleware
	$(GO) test -run='^$$' -fuzz='^FuzzValidate$$' -fuzztime=$(FUZZTIME) ./options
	$(GO) test -run='^$$' -fuzz='^FuzzCompleter$$' -fuzztime=$(FUZZTIME) ./internal/batch
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./internal/ratelimit
