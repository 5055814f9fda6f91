package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/microsoft/kiota-abstractions-go/authentication"
	msgraphsdk "github.com/microsoftgraph/msgraph-sdk-go"
	msgraphgocore "github.com/microsoftgraph/msgraph-sdk-go-core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seen is one attempt as it reached the server.
type seen struct {
	method, path, query, sdkVersion, requestID, retryAttempt, body string
}

// graphAPI serves throttletest's Graph-like answers, records every
// attempt, and answers 429 with Retry-After: retryAfter to the attempts
// throttle picks.
type graphAPI struct {
	*httptest.Server
	mu         sync.Mutex
	attempts   []seen
	throttle   func(a seen, earlier []seen) bool
	retryAfter string
}

func newGraphAPI(t *testing.T, retryAfter string, throttle func(a seen, earlier []seen) bool) *graphAPI {
	t.Helper()
	backend := throttletest.NewServer(throttletest.Config{})
	t.Cleanup(backend.Close)
	g := &graphAPI{throttle: throttle, retryAfter: retryAfter}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		body := raw
		if r.Header.Get("Content-Encoding") == "gzip" {
			if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
				body, _ = io.ReadAll(zr)
			}
		}
		a := seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("SdkVersion"), r.Header.Get("client-request-id"), r.Header.Get("Retry-Attempt"), string(body)}
		g.mu.Lock()
		earlier := append([]seen(nil), g.attempts...)
		g.attempts = append(g.attempts, a)
		g.mu.Unlock()
		if g.throttle(a, earlier) {
			w.Header().Set("Retry-After", g.retryAfter)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"code":"TooManyRequests","message":"Too many requests."}}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *graphAPI) seen(match func(seen) bool) []seen {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []seen
	for _, a := range g.attempts {
		if match(a) {
			out = append(out, a)
		}
	}
	return out
}

func count(earlier []seen, match func(seen) bool) int {
	n := 0
	for _, a := range earlier {
		if match(a) {
			n++
		}
	}
	return n
}

func isPath(p string) func(seen) bool { return func(a seen) bool { return a.path == p } }

func status(t *testing.T, err error) int {
	t.Helper()
	var apiErr interface{ GetStatusCode() int }
	require.True(t, errors.As(err, &apiErr), "an API error, got %v", err)
	return apiErr.GetStatusCode()
}

func TestRun(t *testing.T) {
	page3 := func(a seen) bool { return a.method == http.MethodGet && strings.Contains(a.query, "skiptoken=10") }
	post := func(a seen) bool { return a.method == http.MethodPost && a.path == "/v1.0/users" }
	api := newGraphAPI(t, "1", func(a seen, earlier []seen) bool {
		switch {
		case page3(a):
			return count(earlier, page3) == 0 // the third page's first attempt
		case post(a):
			return count(earlier, post) == 0
		}
		return a.path == "/v1.0/users/user-03" || a.path == "/v1.0/users/user-04" // always
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := run(ctx, api.URL)
	require.NoError(t, err)

	t.Run("Me", func(t *testing.T) {
		assert.Equal(t, "User me", r.me)
		assert.Len(t, api.seen(isPath("/v1.0/me")), 1, "the URL replacement ran")
		assert.Empty(t, api.seen(isPath("/v1.0/users/me-token-to-replace")))
	})
	t.Run("SdkVersion and client-request-id", func(t *testing.T) {
		all := api.seen(func(seen) bool { return true })
		require.NotEmpty(t, all)
		for _, a := range all {
			assert.True(t, strings.HasPrefix(a.sdkVersion, "graph-go/1.89.0, graph-go-core/"), "%s %s: SdkVersion %q", a.method, a.path, a.sdkVersion)
			assert.NotEmpty(t, a.requestID)
		}
	})
	t.Run("paging through a 429", func(t *testing.T) {
		assert.Equal(t, throttletest.GraphUsers, r.users)
		got := api.seen(page3)
		require.Len(t, got, 2, "the throttled page is retried")
		assert.Equal(t, "1", got[1].retryAttempt)
		assert.Equal(t, got[0].requestID, got[1].requestID, "a retry is the same request")
	})
	t.Run("POST retried whole", func(t *testing.T) {
		got := api.seen(post)
		require.Len(t, got, 2)
		assert.Contains(t, got[0].body, `"displayName":"Ada Lovelace"`)
		assert.Equal(t, got[0].body, got[1].body)
		assert.True(t, strings.HasPrefix(r.created, "new-"), r.created)
	})
	t.Run("kiota-http-go's per-request options", func(t *testing.T) {
		assert.Len(t, api.seen(isPath("/v1.0/users/user-03")), 1, "ShouldRetry refused the retry")
		assert.Equal(t, http.StatusTooManyRequests, status(t, r.kiotaErr))
	})
	t.Run("this module's per-request options", func(t *testing.T) {
		assert.Len(t, api.seen(isPath("/v1.0/users/user-04")), 3, "MaxRetries: 2")
		assert.Equal(t, http.StatusTooManyRequests, status(t, r.oursErr))
	})
}

// A chain holds one retry handler: msgraph-sdk-go-core's defaults would
// add kiota-http-go's beside this one, and retry options beside a handler
// would be silently dropped.
func TestRunRejectsConflicts(t *testing.T) {
	handler, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	tests := []struct {
		name string
		opts []pipeline.Option
		want string
	}{
		{"msgraph-sdk-go-core's defaults", []pipeline.Option{
			pipeline.WithMiddlewares(msgraphgocore.GetDefaultMiddlewaresWithOptions(&msgraphgocore.GraphClientOptions{})...),
		}, "*nethttplibrary.RetryHandler"},
		{"retry options and a handler", []pipeline.Option{
			pipeline.WithRetryOptions(options.RetryHandlerOptions{MaxRetries: 2}), pipeline.WithRetryHandler(handler),
		}, "both WithRetryOptions and WithRetryHandler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(context.Background(), "http://127.0.0.1:1", tt.opts...)
			require.ErrorIs(t, err, pipeline.ErrConflict)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A client whose Timeout the server's Retry-After outlasts gets the 429 at
// once, as Graph's error, not a deadline error after the timeout.
func TestRunTimeoutReturnsTheThrottle(t *testing.T) {
	api := newGraphAPI(t, "600", func(a seen, _ []seen) bool { return a.path == "/v1.0/me" })
	start := time.Now()
	_, err := run(context.Background(), api.URL, pipeline.WithTimeout(5*time.Minute))
	require.Error(t, err)
	assert.Equal(t, http.StatusTooManyRequests, status(t, err))
	assert.Less(t, time.Since(start), time.Minute, "not waited for")
	assert.Len(t, api.seen(isPath("/v1.0/me")), 1)
}

// The one-line switch: graph.NewRequestAdapter in place of
// msgraphsdk.NewGraphRequestAdapter.
func TestNewRequestAdapterServesGraphServiceClient(t *testing.T) {
	api := newGraphAPI(t, "1", func(a seen, earlier []seen) bool { return len(earlier) == 0 })
	adapter, err := graph.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{}, graph.WithClientOptions(msgraphsdk.GetDefaultClientOptions()))
	require.NoError(t, err)
	adapter.SetBaseUrl(api.URL + "/v1.0")
	me, err := msgraphsdk.NewGraphServiceClient(adapter).Me().Get(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "User me", deref(me.GetDisplayName()))
	got := api.seen(isPath("/v1.0/me"))
	require.Len(t, got, 2, "the 429 is retried")
	assert.True(t, strings.HasPrefix(got[1].sdkVersion, "graph-go/1.89.0, "), got[1].sdkVersion)
}
