# The two commands a new user needs: `make demo` and `make test`.
GO ?= go

.PHONY: test demo bench fuzz vet floor

test: vet floor
	$(GO) test -race -count=1 ./...

# A consumer declaring the oldest supported Go release keeps its go directive.
floor:
	./scripts/check-floor.sh

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
