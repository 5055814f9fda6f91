package middleware_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nethttplibrary "github.com/microsoft/kiota-http-go"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// rawServer is a loopback HTTP/1.1 server written at the byte level, so a
// test can break a connection at any point of an exchange. Each request
// read is recorded and passed, with its number (from 1, across
// connections), to the script, which writes the reply itself and returns
// false to stop serving that connection.
type rawServer struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
	requests []seenRequest
	accepted atomic.Int32
	changed  chan struct{} // closed and replaced whenever a request is read
}

type seenRequest struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

type script func(n int, req *http.Request, c net.Conn) bool

func newRawServer(t *testing.T, s script) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &rawServer{ln: ln, changed: make(chan struct{})}
	srv.wg.Add(1)
	go srv.serve(s)
	t.Cleanup(srv.close)
	return srv
}

func (s *rawServer) URL() string { return "http://" + s.ln.Addr().String() }

func (s *rawServer) serve(sc script) {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				body, _ := io.ReadAll(req.Body)
				s.mu.Lock()
				s.requests = append(s.requests, seenRequest{req.Method, req.URL.Path, req.Header, body})
				n := len(s.requests)
				close(s.changed)
				s.changed = make(chan struct{})
				s.mu.Unlock()
				if !sc(n, req, c) {
					return
				}
			}
		}()
	}
}

// close stops the listener, breaks every connection still open and waits
// for the server's goroutines.
func (s *rawServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *rawServer) seen() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.requests...)
}

// waitRequest blocks until request n has been read by the server.
func (s *rawServer) waitRequest(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		got, ch := len(s.requests), s.changed
		s.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("request %d never reached the server", n)
		}
	}
}

// reply writes a complete response with a Content-Length body.
func writeReply(c net.Conn, status int, header http.Header, body string) bool {
	resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Header: header,
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	return resp.Write(c) == nil
}

// reset closes c with an RST instead of a FIN, as a crashing server or a
// middlebox does.
func reset(c net.Conn) {
	_ = c.(*net.TCPConn).SetLinger(0)
	_ = c.Close()
}

// newClient returns a client whose pipeline holds the given middlewares
// over a transport of its own, closed when the test ends.
func newRawClient(t *testing.T, mws ...nethttplibrary.Middleware) *http.Client {
	t.Helper()
	return newRawClientWith(t, &http.Transport{}, mws...)
}

func newRawClientWith(t *testing.T, base *http.Transport, mws ...nethttplibrary.Middleware) *http.Client {
	t.Helper()
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: nethttplibrary.NewCustomTransportWithParentTransport(base, mws...)}
}

func newFaultHandler(t *testing.T, opts options.RetryHandlerOptions) *middleware.RetryHandler {
	t.Helper()
	h, err := middleware.NewRetryHandler(opts)
	require.NoError(t, err)
	return h
}

// noWait retries at once, so a test without a clock never sleeps; the
// handler's rules (Retry-After, limits) still apply on top.
var noWait = options.PolicyFunc(func(options.Attempt) (time.Duration, bool) { return 0, true })

// fixedDelays is the default backoff with its jitter pinned to zero, so
// the waits are exactly 3 s, 12 s, 27 s ...
var fixedDelays = options.Exponential{Random: func() float64 { return 0 }}

func newClock() *clocktest.Clock { return clocktest.New(fuzzNow) }

// outcome is the outcome of a request sent from another goroutine.
type outcome struct {
	resp *http.Response
	body string
	err  error
}

// goDo sends req from a new goroutine and returns where its outcome will
// arrive, with the body read and closed.
func goDo(c *http.Client, req *http.Request) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		resp, err := c.Do(req)
		r := outcome{resp: resp, err: err}
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			r.body = string(b)
			if rerr != nil {
				r.err = rerr
			}
		}
		out <- r
	}()
	return out
}

// await returns the outcome, failing the test if the request hangs.
func await(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not return")
		return outcome{}
	}
}

// manualCtx is a context whose deadline the test fires by hand, so that a
// test of "the deadline wins" does not depend on wall time.
type manualCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	err  error
}

func newManualCtx() *manualCtx {
	return &manualCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *manualCtx) Done() <-chan struct{} { return c.done }

func (c *manualCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *manualCtx) expire() {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = context.DeadlineExceeded
		c.mu.Unlock()
		close(c.done)
	})
}

// connTracker counts the client-side connections a transport closes, so a
// test can wait until the transport has dropped a connection the server
// broke instead of racing with its discovery.
type connTracker struct {
	mu      sync.Mutex
	closed  int
	changed chan struct{}
}

// trackedTransport returns a transport whose connections report their
// closing to the returned tracker.
func trackedTransport() (*http.Transport, *connTracker) {
	tr := &connTracker{changed: make(chan struct{})}
	var d net.Dialer
	return &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &trackedConn{Conn: c, tr: tr}, nil
	}}, tr
}

func (tr *connTracker) waitClosed(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		tr.mu.Lock()
		got, ch := tr.closed, tr.changed
		tr.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("the transport never closed connection %d", n)
		}
	}
}

type trackedConn struct {
	net.Conn
	tr   *connTracker
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.tr.mu.Lock()
		c.tr.closed++
		close(c.tr.changed)
		c.tr.changed = make(chan struct{})
		c.tr.mu.Unlock()
	})
	return err
}
