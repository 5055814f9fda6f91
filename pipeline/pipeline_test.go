package pipeline_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	abs "github.com/microsoft/kiota-abstractions-go"
	"github.com/microsoft/kiota-abstractions-go/authentication"
	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
)

// seen is one attempt as the server got it.
type seen struct {
	path, encoding, attempt string
	raw, body               []byte
}

// recorder answers from a per-path script, then 200, recording attempts.
type recorder struct {
	mu      sync.Mutex
	script  map[string][]int
	attempt []seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	body := raw
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			body, _ = io.ReadAll(zr)
		}
	}
	rec.mu.Lock()
	rec.attempt = append(rec.attempt, seen{r.URL.Path, r.Header.Get("Content-Encoding"), r.Header.Get("Retry-Attempt"), raw, body})
	status := http.StatusOK
	if s := rec.script[r.URL.Path]; len(s) > 0 {
		status, rec.script[r.URL.Path] = s[0], s[1:]
	}
	rec.mu.Unlock()
	switch status {
	case http.StatusFound:
		w.Header().Set("Location", "/b")
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "3")
	}
	w.WriteHeader(status)
}

func (rec *recorder) seen() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seen(nil), rec.attempt...)
}

func newServer(t *testing.T, script map[string][]int) (*httptest.Server, *recorder) {
	rec := &recorder{script: script}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return srv, rec
}

func newAdapter(t *testing.T, srv *httptest.Server, clk *clocktest.Clock) *nethttplibrary.NetHttpRequestAdapter {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	adapter, err := pipeline.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{},
		pipeline.WithTransport(base), pipeline.WithRetryOptions(options.RetryHandlerOptions{Clock: clk}))
	require.NoError(t, err)
	adapter.SetBaseUrl(srv.URL)
	return adapter
}

func postInfo(path string, body []byte) *abs.RequestInformation {
	ri := abs.NewRequestInformation()
	ri.Method = abs.POST
	ri.UrlTemplate = "{+baseurl}" + path
	ri.Headers.Add("Content-Type", "application/json")
	ri.Content = body
	return ri
}

func TestMiddlewares_FixedOrder(t *testing.T) {
	h, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	var names []string
	for _, m := range pipeline.Middlewares(h) {
		names = append(names, reflect.TypeOf(m).String())
	}
	assert.Equal(t, []string{
		"*middleware.RetryHandler",
		"*nethttplibrary.RedirectHandler",
		"*nethttplibrary.ParametersNameDecodingHandler",
		"*nethttplibrary.UserAgentHandler",
		"*nethttplibrary.CompressionHandler",
		"*nethttplibrary.HeadersInspectionHandler",
	}, names)
}

func TestRequestAdapter_RetriedCompressedPostArrivesIdentical(t *testing.T) {
	srv, rec := newServer(t, map[string][]int{"/users": {429, 503}})
	clk := clocktest.New(time.Unix(0, 0))
	adapter := newAdapter(t, srv, clk)
	payload := []byte(`{"displayName":"Grace Hopper","mailNickname":"grace","accountEnabled":true}`)

	err, waits := clocktest.Drive(clk, func() error {
		return adapter.SendNoContent(context.Background(), postInfo("/users", payload), nil)
	})
	require.NoError(t, err)
	assert.Len(t, waits, 2)
	got := rec.seen()
	require.Len(t, got, 3)
	for i, a := range got {
		assert.Equal(t, "gzip", a.encoding, "attempt %d is compressed once", i+1)
		assert.Equal(t, payload, a.body, "attempt %d decompresses to the original", i+1)
		assert.Equal(t, got[0].raw, a.raw, "attempt %d sends the same bytes", i+1)
	}
	assert.Equal(t, []string{"", "1", "2"}, []string{got[0].attempt, got[1].attempt, got[2].attempt})
}

func TestRequestAdapter_RedirectThen429IsRetried(t *testing.T) {
	srv, rec := newServer(t, map[string][]int{"/a": {302, 302}, "/b": {429}})
	clk := clocktest.New(time.Unix(0, 0))
	adapter := newAdapter(t, srv, clk)
	ri := abs.NewRequestInformation()
	ri.Method = abs.GET
	ri.UrlTemplate = "{+baseurl}/a"

	err, waits := clocktest.Drive(clk, func() error { return adapter.SendNoContent(context.Background(), ri, nil) })
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{3 * time.Second}, waits)
	var paths []string
	for _, a := range rec.seen() {
		paths = append(paths, a.path+"#"+a.attempt)
	}
	assert.Equal(t, []string{"/a#", "/b#", "/a#1", "/b#1"}, paths)
}

func TestRequestAdapter_PerRequestOption(t *testing.T) {
	srv, rec := newServer(t, map[string][]int{"/users": {429, 429}})
	clk := clocktest.New(time.Unix(0, 0))
	adapter := newAdapter(t, srv, clk)
	ri := postInfo("/users", []byte(`{}`))
	ri.AddRequestOptions([]abs.RequestOption{&options.RetryHandlerOptions{MaxRetries: -1}})

	err, waits := clocktest.Drive(clk, func() error { return adapter.SendNoContent(context.Background(), ri, nil) })
	require.Error(t, err, "the 429 reaches the caller")
	assert.Empty(t, waits)
	assert.Len(t, rec.seen(), 1)
}

func TestNewClient_RejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  pipeline.Option
		want string
	}{
		{"retry options", pipeline.WithRetryOptions(options.RetryHandlerOptions{MaxDelay: -time.Second}), "MaxDelay = -1s"},
		{"nil handler", pipeline.WithRetryHandler(nil), "handler is nil"},
		{"nil transport", pipeline.WithTransport(nil), "transport is nil"},
		{"negative timeout", pipeline.WithTimeout(-time.Second), "timeout = -1s"},
		{"nil retry defaults", pipeline.WithRetryDefaults(nil), "fill is nil"},
		{"retry defaults set badly", pipeline.WithRetryDefaults(func(o *options.RetryHandlerOptions) { o.MaxDelay = -time.Second }), "MaxDelay = -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := pipeline.NewClient(tt.opt)
			assert.Nil(t, c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestNewClient_RetryDefaults checks that defaults fill the options the
// handler is built from after every option, in order, and leave a handler
// given whole alone.
func TestNewClient_RetryDefaults(t *testing.T) {
	given, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	tests := []struct {
		name string
		opts func(record func(string) pipeline.Option) []pipeline.Option
		want []string // what each fill saw in MaxRetries, in order
	}{
		{"no options", func(record func(string) pipeline.Option) []pipeline.Option {
			return []pipeline.Option{record("a"), record("b")}
		}, []string{"a:0", "b:1"}},
		{"after the options that follow", func(record func(string) pipeline.Option) []pipeline.Option {
			return []pipeline.Option{record("a"), pipeline.WithRetryOptions(options.RetryHandlerOptions{MaxRetries: 5})}
		}, []string{"a:5"}},
		{"a handler given whole", func(record func(string) pipeline.Option) []pipeline.Option {
			return []pipeline.Option{record("a"), pipeline.WithRetryHandler(given)}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var saw []string
			record := func(name string) pipeline.Option {
				return pipeline.WithRetryDefaults(func(o *options.RetryHandlerOptions) {
					saw = append(saw, name+":"+strconv.Itoa(o.MaxRetries))
					o.MaxRetries++
				})
			}
			c, err := pipeline.NewClient(tt.opts(record)...)
			require.NoError(t, err)
			assert.NotNil(t, c)
			assert.Equal(t, tt.want, saw)
		})
	}
}

func TestNewClient_RejectsConflicts(t *testing.T) {
	ours, err := middleware.NewRetryHandler(options.RetryHandlerOptions{})
	require.NoError(t, err)
	kiota := nethttplibrary.NewRetryHandler()
	tests := []struct {
		name string
		opts []pipeline.Option
		want string
	}{
		{"kiota's retry handler in WithMiddlewares", []pipeline.Option{pipeline.WithMiddlewares(nethttplibrary.NewRedirectHandler(), kiota)},
			"WithMiddlewares: handler 1 is a *nethttplibrary.RetryHandler"},
		{"kiota's defaults in WithMiddlewares", []pipeline.Option{pipeline.WithMiddlewares(nethttplibrary.GetDefaultMiddlewares()...)},
			"*nethttplibrary.RetryHandler"},
		{"our retry handler in WithMiddlewares", []pipeline.Option{pipeline.WithMiddlewares(ours)},
			"WithMiddlewares: handler 0 is a *middleware.RetryHandler"},
		{"a retry handler in WithOuterMiddlewares", []pipeline.Option{pipeline.WithOuterMiddlewares(kiota)},
			"WithOuterMiddlewares: handler 0 is a *nethttplibrary.RetryHandler"},
		{"options and handler", []pipeline.Option{pipeline.WithRetryOptions(options.RetryHandlerOptions{MaxRetries: 2}), pipeline.WithRetryHandler(ours)},
			"both WithRetryOptions and WithRetryHandler"},
		{"handler and options", []pipeline.Option{pipeline.WithRetryHandler(ours), pipeline.WithRetryOptions(options.RetryHandlerOptions{})},
			"both WithRetryOptions and WithRetryHandler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := pipeline.NewClient(tt.opts...)
			assert.Nil(t, c)
			require.ErrorIs(t, err, pipeline.ErrConflict)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestNewClient_NilMiddleware(t *testing.T) {
	_, err := pipeline.NewClient(pipeline.WithMiddlewares(nethttplibrary.NewRedirectHandler(), nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "handler 1 is nil")
}

// outerMark adds a header to the caller's request, once, before the retry
// handler copies it for each attempt.
type outerMark struct{ calls int }

func (o *outerMark) Intercept(p nethttplibrary.Pipeline, i int, req *http.Request) (*http.Response, error) {
	o.calls++
	req.Header.Set("X-Outer", strconv.Itoa(o.calls))
	return p.Next(req, i)
}

func TestNewClient_OuterMiddlewaresRunOncePerRequest(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("X-Outer"))
		if len(got) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	mark := &outerMark{}
	c, err := pipeline.NewClient(pipeline.WithTransport(srv.Client().Transport), pipeline.WithOuterMiddlewares(mark),
		pipeline.WithRetryOptions(options.RetryHandlerOptions{Policy: options.Fixed{Retries: 1, Interval: time.Nanosecond}}))
	require.NoError(t, err)
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"1", "1"}, got, "both attempts carry the one mark")
}
