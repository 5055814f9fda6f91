package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
)

func TestRetryAfter(t *testing.T) {
	now := epoch
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"absent", http.Header{}, 0, false},
		{"nil header", nil, 0, false},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"delta-seconds", http.Header{"Retry-After": {"120"}}, 2 * time.Minute, true},
		{"padded", http.Header{"Retry-After": {"  5 "}}, 5 * time.Second, true},
		{"fraction rounds up to the nanosecond", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		{"negative ignored", http.Header{"Retry-After": {"-1"}}, 0, false},
		{"garbage ignored", http.Header{"Retry-After": {"later"}}, 0, false},
		{"NaN ignored", http.Header{"Retry-After": {"NaN"}}, 0, false},
		{"huge saturates", http.Header{"Retry-After": {"99999999999999999999999"}}, time.Duration(1<<63 - 1), true},
		{"IMF-fixdate", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{"RFC 850", http.Header{"Retry-After": {now.Add(time.Hour).Format(time.RFC850)}}, time.Hour, true},
		{"asctime", http.Header{"Retry-After": {now.Add(3 * time.Second).Format(time.ANSIC)}}, 3 * time.Second, true},
		{"past date means now", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"far future date saturates", http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}}, time.Duration(1<<63 - 1), true},
		{"retry-after-ms", http.Header{"Retry-After-Ms": {"20"}}, 20 * time.Millisecond, true},
		{"x-ms-retry-after-ms", http.Header{"X-Ms-Retry-After-Ms": {"1234"}}, 1234 * time.Millisecond, true},
		{"bad ms ignored, Retry-After used", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"2"}}, 2 * time.Second, true},
		{"longest wins", http.Header{"Retry-After": {"1"}, "X-Ms-Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond, true},
		{"every Retry-After field is read", http.Header{"Retry-After": {"0", "2"}}, 2 * time.Second, true},
		{"a bad field does not hide a good one", http.Header{"Retry-After": {"later", "3"}}, 3 * time.Second, true},
		{"the latest date wins", http.Header{"Retry-After": {now.Add(time.Minute).Format(http.TimeFormat), "5"}}, time.Minute, true},
		{"every ms field is read", http.Header{"Retry-After-Ms": {"10", "700"}, "X-Ms-Retry-After-Ms": {"20", "x"}}, 700 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := middleware.RetryAfter(tt.header, now)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}
