package graph_test

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	abstractions "github.com/microsoft/kiota-abstractions-go"
	"github.com/microsoft/kiota-abstractions-go/authentication"
	nethttplibrary "github.com/microsoft/kiota-http-go"
	msgraphgocore "github.com/microsoftgraph/msgraph-sdk-go-core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
)

// attempt is what the server saw of one request.
type attempt struct {
	path, sdkVersion, requestID, retryAttempt, body string
	sdkVersions                                     int
}

// graphServer answers each request with the next status of its script
// (then 200), a 429 with Retry-After: 0, and records the attempts.
type graphServer struct {
	*httptest.Server
	mu       sync.Mutex
	script   []int
	attempts []attempt
}

func newGraphServer(t *testing.T, script ...int) *graphServer {
	t.Helper()
	s := &graphServer{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err == nil {
				body = zr
			}
		}
		b, _ := io.ReadAll(body)
		s.mu.Lock()
		s.attempts = append(s.attempts, attempt{r.URL.Path, r.Header.Get("SdkVersion"), r.Header.Get("client-request-id"), r.Header.Get("Retry-Attempt"), string(b), len(r.Header.Values("SdkVersion"))})
		status := http.StatusOK
		if len(s.script) > 0 {
			status, s.script = s.script[0], s.script[1:]
		}
		s.mu.Unlock()
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *graphServer) seen() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts...)
}

func send(t *testing.T, c *http.Client, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp
}

func TestNewClient_KeepsGraphHandlers(t *testing.T) {
	tests := []struct {
		name       string
		opts       []pipeline.Option
		sdkVersion string // prefix
	}{
		{"defaults", nil, "graph-go-core/" + msgraphgocore.CoreVersion},
		{"service library named", []pipeline.Option{graph.WithClientOptions(msgraphgocore.GraphClientOptions{GraphServiceLibraryVersion: "1.89.0"})},
			"graph-go/1.89.0, graph-go-core/" + msgraphgocore.CoreVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newGraphServer(t, http.StatusTooManyRequests, http.StatusTooManyRequests)
			c, err := graph.NewClient(append(tt.opts, pipeline.WithTransport(srv.Client().Transport))...)
			require.NoError(t, err)
			resp := send(t, c, http.MethodPost, srv.URL+"/v1.0/users/me-token-to-replace/sendMail", `{"message":{}}`)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			got := srv.seen()
			require.Len(t, got, 3, "the two 429s are retried")
			for i, a := range got {
				assert.Equal(t, "/v1.0/me/sendMail", a.path, "attempt %d: the URL replacement ran", i+1)
				assert.True(t, strings.HasPrefix(a.sdkVersion, tt.sdkVersion), "attempt %d: SdkVersion %q", i+1, a.sdkVersion)
				assert.Equal(t, 1, a.sdkVersions, "attempt %d: the header is added once", i+1)
				assert.Equal(t, got[0].requestID, a.requestID, "attempt %d: one client-request-id for every attempt", i+1)
				assert.Equal(t, `{"message":{}}`, a.body, "attempt %d: the body, whole", i+1)
			}
			assert.NotEmpty(t, got[0].requestID)
			assert.Equal(t, []string{"", "1", "2"}, []string{got[0].retryAttempt, got[1].retryAttempt, got[2].retryAttempt})
		})
	}
}

func TestNewClient_RejectsASecondRetryHandler(t *testing.T) {
	graphDefaults := msgraphgocore.GetDefaultMiddlewaresWithOptions(&msgraphgocore.GraphClientOptions{})
	tests := []struct {
		name string
		opts []pipeline.Option
		want string
	}{
		{"msgraph-sdk-go-core's defaults", []pipeline.Option{pipeline.WithMiddlewares(graphDefaults...)}, "*nethttplibrary.RetryHandler"},
		{"kiota-http-go's retry handler", []pipeline.Option{pipeline.WithMiddlewares(nethttplibrary.NewRetryHandler())}, "*nethttplibrary.RetryHandler"},
		{"retry options beside a handler", []pipeline.Option{pipeline.WithRetryOptions(options.RetryHandlerOptions{}), pipeline.WithRetryHandler(mustHandler(t))},
			"both WithRetryOptions and WithRetryHandler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := graph.NewClient(tt.opts...)
			assert.Nil(t, c)
			require.ErrorIs(t, err, pipeline.ErrConflict)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// The client's Timeout ends no wait with a deadline error: a retry that
// would start after it is not made, and the 429 comes back at once.
func TestNewClient_TimeoutReturnsTheLastResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"code":"TooManyRequests"}}`)
	}))
	defer srv.Close()
	c, err := graph.NewClient(pipeline.WithTransport(srv.Client().Transport), pipeline.WithTimeout(5*time.Minute))
	require.NoError(t, err)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/v1.0/users/me-token-to-replace", nil)
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Contains(t, string(b), "TooManyRequests")
}

func mustHandler(t *testing.T) *middleware.RetryHandler {
	t.Helper()
	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	return h
}

func TestNewRequestAdapter(t *testing.T) {
	srv := newGraphServer(t, http.StatusTooManyRequests)
	adapter, err := graph.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{},
		graph.WithClientOptions(msgraphgocore.GraphClientOptions{GraphServiceLibraryVersion: "1.89.0"}),
		pipeline.WithTransport(srv.Client().Transport))
	require.NoError(t, err)
	adapter.SetBaseUrl(srv.URL + "/v1.0")
	info := abstractions.NewRequestInformationWithMethodAndUrlTemplateAndPathParameters(abstractions.GET, "{+baseurl}/users/me-token-to-replace", map[string]string{})
	require.NoError(t, adapter.SendNoContent(context.Background(), info, nil))
	got := srv.seen()
	require.Len(t, got, 2, "the 429 is retried")
	for _, a := range got {
		assert.Equal(t, "/v1.0/me", a.path)
		assert.True(t, strings.HasPrefix(a.sdkVersion, "graph-go/1.89.0, graph-go-core/"), a.sdkVersion)
	}

	_, err = graph.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{}, pipeline.WithMiddlewares(nethttplibrary.NewRetryHandler()))
	require.ErrorIs(t, err, pipeline.ErrConflict)
}
