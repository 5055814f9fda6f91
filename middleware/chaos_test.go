package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// chaosServer answers each attempt with a fault drawn from a seeded
// source, and records what it did with every request, by the id the
// client gave it.
type chaosServer struct {
	mu   sync.Mutex
	rand *rand.Rand
	seen map[string]*chaosRecord
}

type chaosRecord struct {
	unsafe   bool   // neither idempotent nor carrying a key
	executed int    // arrivals not refused with 429 or 503
	last     string // the body of the last complete answer; "" after a reset
}

const chaosID = "X-Chaos-Id"

func (s *chaosServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	id := r.Header.Get(chaosID)
	rec := s.seen[id]
	if rec == nil {
		rec = &chaosRecord{}
		s.seen[id] = rec
	}
	rec.unsafe = (r.Method == http.MethodPost || r.Method == http.MethodPatch) && r.Header.Get("Idempotency-Key") == ""
	fault := s.rand.IntN(10)
	slow := time.Duration(s.rand.IntN(3)) * time.Millisecond
	if fault != 3 && fault != 4 {
		rec.executed++
	}
	body := fmt.Sprintf("%d:%s:%d", fault, id, rec.executed)
	rec.last = body
	if fault == 5 {
		rec.last = ""
	}
	s.mu.Unlock()

	switch fault {
	case 3:
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
	case 4:
		w.Header().Set("Retry-After-Ms", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	case 5: // the request was read: reset the connection or the stream
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				reset(c)
				return
			}
		}
		panic(http.ErrAbortHandler)
	case 6: // slow headers
		select {
		case <-r.Context().Done():
		case <-time.After(slow):
		}
		fallthrough
	case 7:
		w.WriteHeader(http.StatusGatewayTimeout)
	default:
		w.WriteHeader(http.StatusOK)
	}
	_, _ = io.WriteString(w, body)
}

// trackedBodies wraps every response body the transport returns, to count
// those never closed.
type trackedBodies struct{ open atomic.Int64 }

func (b *trackedBodies) Intercept(p nethttplibrary.Pipeline, i int, req *http.Request) (*http.Response, error) {
	resp, err := p.Next(req, i)
	if resp != nil && resp.Body != nil {
		b.open.Add(1)
		resp.Body = &trackedBody{ReadCloser: resp.Body, owner: b}
	}
	return resp, err
}

type trackedBody struct {
	io.ReadCloser
	owner  *trackedBodies
	closed atomic.Bool
}

func (t *trackedBody) Close() error {
	if t.closed.CompareAndSwap(false, true) {
		t.owner.open.Add(-1)
	}
	return t.ReadCloser.Close()
}

// flakyDial fails some dials, so that some attempts fail before any of
// the request is written.
func flakyDial(mu *sync.Mutex, r *rand.Rand) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		fail := r.IntN(8) == 0
		mu.Unlock()
		if fail {
			return nil, errors.New("dial refused")
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

type chaosPanic struct{ id string }

func TestChaos(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last, after the servers close
	const (
		seed     = 15
		requests = 2000
		workers  = 16
	)
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(seed, seed))
	srv := &chaosServer{rand: rand.New(rand.NewPCG(seed, 1)), seen: map[string]*chaosRecord{}}

	h1 := httptest.NewServer(srv)
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(srv)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)

	// The queue's pacing after throttles would make the run take minutes;
	// it holds attempts back and has tests of its own.
	handler := newFaultHandler(t, options.RetryHandlerOptions{
		Queue:      options.QueueOptions{Disabled: true},
		Policy:     noWait,
		MaxRetries: 4,
		ShouldRetry: func(a options.Attempt) bool {
			if a.Request.Header.Get("X-Chaos-Panic") != "" {
				panic(chaosPanic{a.Request.Header.Get(chaosID)})
			}
			if a.Response != nil && a.Request.Header.Get("X-Chaos-Peek") != "" {
				_, _ = io.ReadAll(a.Response.Body)
			}
			return true
		},
	})
	bodies := &trackedBodies{}
	clientFor := func(base *http.Transport) *http.Client {
		base.DialContext = flakyDial(&mu, rand.New(rand.NewPCG(seed, 2)))
		t.Cleanup(base.CloseIdleConnections)
		return &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, handler, bodies)}
	}
	c1 := clientFor(&http.Transport{})
	tls := h2.Client().Transport.(*http.Transport).Clone()
	tls.ForceAttemptHTTP2 = true
	c2 := clientFor(tls)

	type plan struct {
		id, url, method  string
		key, peek, panic bool
		body             int // 0 none/bytes, 1 refusing seeker, 2 failing GetBody
		cancelAfter      time.Duration
		client           *http.Client
	}
	plans := make([]plan, requests)
	for i := range plans {
		p := plan{id: strconv.Itoa(i), client: c1, url: h1.URL}
		if rnd.IntN(2) == 0 {
			p.client, p.url = c2, h2.URL
		}
		p.method = [...]string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete}[rnd.IntN(5)]
		p.key = rnd.IntN(4) == 0
		p.peek = rnd.IntN(4) == 0
		p.panic = rnd.IntN(50) == 0
		p.body = rnd.IntN(6) % 3
		if rnd.IntN(8) == 0 {
			p.cancelAfter = time.Duration(rnd.IntN(3000)) * time.Microsecond
		}
		plans[i] = p
	}

	type result struct {
		body     string
		err      error
		panicked bool
		http2    bool
	}
	results := make([]result, requests)
	send := func(p plan) (res result) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if p.cancelAfter > 0 {
			stop := time.AfterFunc(p.cancelAfter, cancel)
			defer stop.Stop()
		}
		var body io.Reader
		if p.method != http.MethodGet && p.method != http.MethodDelete {
			body = bytes.NewReader([]byte(`{"n":` + p.id + `}`))
			if p.body == 1 {
				body = refusingSeeker{strings.NewReader(`{"n":` + p.id + `}`)}
			}
		}
		req, err := http.NewRequestWithContext(ctx, p.method, p.url+"/v1.0/items", body)
		if err != nil {
			return result{err: err}
		}
		if p.body == 2 && req.GetBody != nil {
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("rewind failed") }
		}
		req.Header.Set(chaosID, p.id)
		if p.key {
			req.Header.Set("Idempotency-Key", p.id)
		}
		if p.peek {
			req.Header.Set("X-Chaos-Peek", "1")
		}
		if p.panic {
			req.Header.Set("X-Chaos-Panic", "1")
		}
		defer func() {
			if v := recover(); v != nil {
				require.Equal(t, chaosPanic{p.id}, v, "the callback's panic, unchanged")
				res = result{panicked: true}
			}
		}()
		resp, err := p.client.Do(req)
		if err != nil {
			return result{err: err}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return result{body: string(b), err: err, http2: resp.ProtoMajor == 2}
	}

	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < requests; i = next.Add(1) - 1 {
				results[i] = send(plans[i])
			}
		})
	}
	wg.Wait()

	srv.mu.Lock()
	defer srv.mu.Unlock()
	var answered, canceled, failed, panicked, overHTTP2 int
	for i, res := range results {
		if res.http2 {
			overHTTP2++
		}
		p, rec := plans[i], srv.seen[plans[i].id]
		switch {
		case res.panicked:
			panicked++
			assert.True(t, p.panic, "request %s panicked unasked", p.id)
		case res.err == nil:
			answered++
			require.NotNil(t, rec, "request %s answered without reaching the server", p.id)
			assert.Equal(t, rec.last, res.body, "request %s: the server's last answer", p.id)
		case errors.Is(res.err, context.Canceled):
			canceled++
		default:
			failed++
			// A transport error is returned only when the last attempt got
			// no answer: the server reset it, or it never reached the server.
			if rec != nil && rec.last != "" {
				assert.ErrorContains(t, res.err, "dial refused", "request %s hides the server's answer %q", p.id, rec.last)
			}
		}
		if rec != nil && rec.unsafe && !p.key {
			assert.LessOrEqual(t, rec.executed, 1, "request %s %s executed twice", p.method, p.id)
		}
	}
	assert.Zero(t, bodies.open.Load(), "response bodies left open")
	t.Logf("answered %d (%d over HTTP/2), canceled %d, failed %d, panicked %d; attempts %d",
		answered, overHTTP2, canceled, failed, panicked, handler.Stats().Attempts)
	assert.Positive(t, overHTTP2)
	assert.Positive(t, answered)
	assert.Positive(t, canceled)
	assert.Positive(t, failed)
	assert.Positive(t, panicked)
}
