package effective

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

func TestLimitsOf(t *testing.T) {
	tests := []struct {
		name string
		opts options.RetryHandlerOptions
		want Limits
	}{
		{"zero: the defaults", options.RetryHandlerOptions{}, Limits{MaxRetries: 10, MaxElapsed: 1800 * time.Second}},
		{"a policy counts its own retries", options.RetryHandlerOptions{Policy: options.NoRetry{}}, Limits{MaxElapsed: 1800 * time.Second}},
		{"set fields kept", options.RetryHandlerOptions{MaxRetries: -1, MaxElapsed: time.Second, RetriesTimeLimit: 2 * time.Second},
			Limits{MaxRetries: -1, MaxElapsed: time.Second, RetriesTimeLimit: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, LimitsOf(&tt.opts)) })
	}
}

func TestPolicy(t *testing.T) {
	assert.Equal(t, options.Exponential{Retries: 4, InitialDelay: time.Second, MaxDelay: time.Minute},
		Policy(&options.RetryHandlerOptions{MaxRetries: 4, InitialDelay: time.Second, MaxDelay: time.Minute}))
	assert.Equal(t, options.Exponential{}, Policy(&options.RetryHandlerOptions{MaxRetries: -1}), "never retrying is MaxRetries' business")
	assert.Equal(t, options.Fixed{Retries: 2}, Policy(&options.RetryHandlerOptions{Policy: options.Fixed{Retries: 2}}))
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		codes  []int
		status int
		want   bool
	}{
		{nil, http.StatusTooManyRequests, true},
		{nil, http.StatusServiceUnavailable, true},
		{nil, http.StatusGatewayTimeout, true},
		{nil, http.StatusInternalServerError, false},
		{[]int{http.StatusInternalServerError}, http.StatusInternalServerError, true},
		{[]int{http.StatusInternalServerError}, http.StatusTooManyRequests, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Retryable(&options.RetryHandlerOptions{StatusCodes: tt.codes}, tt.status), "codes %v, status %d", tt.codes, tt.status)
	}
}
