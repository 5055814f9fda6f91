package observability

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"
)

func TestAttemptSpanName(t *testing.T) {
	assert.Equal(t, "RetryHandler_Intercept - attempt 1", AttemptSpanName(1))
	assert.Equal(t, "RetryHandler_Intercept - attempt 12", AttemptSpanName(12))
}

// TestNamingRules checks the names this package defines against the
// OpenTelemetry naming rules: lowercase, dot-separated namespaces, snake
// case within a component, and (but the Kiota ones and the semantic
// conventions') inside Namespace.
func TestNamingRules(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	ours := []string{
		string(EnableKey), string(RetryReasonKey), string(StopReasonKey),
		string(QueueExpectedDurationKey), string(QueueHeldDurationKey), string(BatchItemsKey),
		EventQueueHeld, EventQueueReleased, EventGivenUp, EventBatchItemsResent,
		MetricRetries, MetricDelay, MetricQueueDuration, MetricQueueHeldRequests, MetricBatchItemsResent,
	}
	for _, n := range ours {
		assert.Regexp(t, valid, n)
		assert.Regexp(t, `^com\.microsoft\.kiota\.handler\.retry\.`, n)
	}
	semconv := map[attribute.Key]string{
		HTTPRequestResendCountKey: "http.request.resend_count",
		HTTPResponseStatusCodeKey: "http.response.status_code",
		HTTPRequestResendDelayKey: "http.request.resend_delay",
		URLFullKey:                "url.full",
	}
	for k, want := range semconv {
		assert.Equal(t, want, string(k))
	}
	values := []string{
		RetryReasonResponse, RetryReasonTransportError, RetryReasonAttemptTimeout,
		StopMaxRetries, StopMaxElapsed, StopRetriesTimeLimit, StopForwardOnlyBody,
		StopPolicy, StopShouldRetry, StopNotIdempotent, StopPermanentError,
		StopRewindFailed,
	}
	seen := map[string]bool{}
	for _, v := range values {
		assert.Regexp(t, `^[a-z][a-z_]*$`, v)
		assert.False(t, seen[v], "%s used twice", v)
		seen[v] = true
	}
}
