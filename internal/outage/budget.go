package outage

// The retry budget of a host, gRPC's retry throttling (maxTokens 10) in
// the terms of the AWS SDK's retry quota (a success gives back what its
// retry took). Tokens are kept in thousandths so that the ratio is exact
// in an atomic integer.
const (
	// retryRatio is what each request puts in: half a retry, the bound
	// the handler keeps on a host that fails every request.
	retryRatio = 0.5
	// budgetCap is what the bucket holds at most, and at start, as gRPC's
	// maxTokens: a lone request retries as its policy says (10 retries by
	// default), and an outage that starts after a quiet hour is sent at
	// most ten retries more than half its requests.
	budgetCap = 10
	// milliToken is one token.
	milliToken = 1000
)

// deposit puts a request's share into the bucket, up to its cap.
func (h *host) deposit() {
	h.add(int64(retryRatio * milliToken))
}

// refund gives back the token of a retry the host answered.
func (h *host) refund() {
	h.add(milliToken)
}

func (h *host) add(n int64) {
	for {
		t := h.tokens.Load()
		if t >= budgetCap*milliToken {
			return
		}
		if h.tokens.CompareAndSwap(t, min(t+n, budgetCap*milliToken)) {
			return
		}
	}
}

// take takes a whole token, reporting false when there is none.
func (h *host) take() bool {
	for {
		t := h.tokens.Load()
		if t < milliToken {
			return false
		}
		if h.tokens.CompareAndSwap(t, t-milliToken) {
			return true
		}
	}
}
