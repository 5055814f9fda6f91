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

# Each fuzz target for FUZZTIME (default 1m); not part of `make test`.
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzRetryAfter -fuzztime=$(FUZZTIME) ./middleware
