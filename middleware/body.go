package middleware

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// errStaleBody is returned to a reader still holding the body of an attempt
// that a later attempt, or the end of the request, has replaced.
var errStaleBody = errors.New("retry handler: request body was replaced by a newer attempt")

// replayer hands every attempt a body that yields the same bytes as the
// caller's request body, without buffering it.
type replayer struct {
	orig    io.ReadCloser
	getBody func() (io.ReadCloser, error)
	seek    *seekBody // set for an io.Seeker body without GetBody
	sent    bool      // the first attempt has taken its body
}

// newReplayer inspects req's body. The caller's request is not modified.
// It returns a value, which lives in the request's frame: only a seekable
// body without GetBody costs an allocation, shared with its first view.
func newReplayer(req *http.Request) replayer {
	r := replayer{orig: req.Body, getBody: req.GetBody}
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return r
	}
	if s, ok := req.Body.(io.ReadSeeker); ok {
		start, err := s.Seek(0, io.SeekCurrent)
		if err != nil {
			// A body that claims to seek but cannot is forward-only.
			return r
		}
		r.seek = &seekBody{rs: s, start: start, length: -1}
		if req.ContentLength > 0 {
			r.seek.length = req.ContentLength
		}
	}
	return r
}

// rewindable reports whether the body can be sent again.
func (r *replayer) rewindable() bool {
	return r.orig == nil || r.orig == http.NoBody || r.getBody != nil || r.seek != nil
}

// next returns the body for the next attempt.
func (r *replayer) next() (io.ReadCloser, error) {
	first := !r.sent
	r.sent = true
	switch {
	case r.orig == nil || r.orig == http.NoBody:
		return r.orig, nil
	case r.seek != nil:
		return r.seek.next()
	case first:
		return r.orig, nil
	case r.getBody != nil:
		return r.getBody()
	}
	return nil, errors.New("retry handler: request body is forward-only")
}

// finish closes the caller's body once no attempt needs it, as the
// RoundTripper contract asks. Bodies that a transport owns (GetBody and
// forward-only ones) were closed by it.
func (r *replayer) finish() {
	if r.seek != nil {
		r.seek.close(r.orig)
	}
}

// seekBody shares one io.ReadSeeker between attempts. Each attempt gets a
// view tagged with a generation; starting a new attempt rewinds the seeker
// and makes older views fail, so a transport goroutine still writing an
// abandoned attempt can never interleave its reads with the new attempt's.
type seekBody struct {
	mu     sync.Mutex
	rs     io.ReadSeeker
	start  int64
	length int64    // the request's ContentLength when known, else -1
	gen    int      // 0 before the first attempt, -1 once closed
	first  seekView // the first attempt's view, allocated with the body
}

func (s *seekBody) next() (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen > 0 {
		if _, err := s.rs.Seek(s.start, io.SeekStart); err != nil {
			return nil, err
		}
	}
	s.gen++
	if s.gen == 1 {
		s.first = seekView{s: s, gen: 1}
		return &s.first, nil
	}
	return &seekView{s: s, gen: s.gen}, nil
}

func (s *seekBody) close(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen = -1
	_ = c.Close()
}

type seekView struct {
	s    *seekBody
	gen  int
	read int64 // bytes this view delivered
	eof  bool  // the seeker reported the end of the body to this view
}

func (v *seekView) Read(p []byte) (int, error) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	if v.s.gen != v.gen {
		// net/http reads on past a known length to check that the body
		// ends there, and may do so after the response came and the
		// request finished. A view that delivered the whole body answers
		// as the body would, or the connection is not reused.
		if v.eof || v.s.length >= 0 && v.read >= v.s.length {
			return 0, io.EOF
		}
		return 0, errStaleBody
	}
	n, err := v.s.rs.Read(p)
	v.read += int64(n)
	if err == io.EOF {
		v.eof = true
	}
	return n, err
}

// Close is a no-op: the caller's body stays open for later attempts and is
// closed by replayer.finish.
func (v *seekView) Close() error { return nil }

// drainLimit bounds how much of a discarded response body is read so that
// its connection can be reused; a longer body costs its connection instead.
const drainLimit = 64 << 10

// discard drains (bounded) and closes a response the caller will not see.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

// keepLimit bounds how much of a failed response is read into memory
// while its retry waits, to be returned if the retry is never made.
const keepLimit = 16 << 10

// keep reads a failed response so that its connection is free while the
// retry waits. A body of up to keepLimit bytes is read whole and the
// connection released; of a longer one the first keepLimit bytes are read
// and the rest is left unread on its connection, so that the response can
// still be returned whole. It returns resp with its body replaced.
func keep(resp *http.Response) *http.Response {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, keepLimit+1))
	if err == nil && len(buf) <= keepLimit {
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(buf))
		return resp
	}
	// Too long, or broken: the rest (or the error) stays for the caller.
	resp.Body = readThenClose{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
	return resp
}

// readThenClose reads from one reader and closes another.
type readThenClose struct {
	io.Reader
	io.Closer
}

// peekLimit bounds how much of a failed response's body the handler's
// callbacks may read; it is kept in memory to be read again by the caller.
const peekLimit = 64 << 10

// errPeekLimit is returned to a callback that reads past peekLimit.
var errPeekLimit = fmt.Errorf("retry handler: a callback may read at most %d bytes of a response body", peekLimit)

// peekBody is a response body as the handler's callbacks see it: what
// they read is kept so that the caller reads the body whole. Closing it
// does nothing: the handler decides what becomes of the response.
type peekBody struct {
	body io.ReadCloser
	read []byte
}

func (p *peekBody) Read(b []byte) (int, error) {
	room := peekLimit - len(p.read)
	if room <= 0 {
		return 0, errPeekLimit
	}
	if len(b) > room {
		b = b[:room]
	}
	n, err := p.body.Read(b)
	p.read = append(p.read, b[:n]...)
	return n, err
}

func (p *peekBody) Close() error { return nil }

// peek gives resp a body that callbacks may read without taking it from
// the caller, and returns resp.
func peek(resp *http.Response) *http.Response {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp
	}
	if _, ok := resp.Body.(*peekBody); !ok {
		resp.Body = &peekBody{body: resp.Body}
	}
	return resp
}

// unpeek gives resp back a body that yields what callbacks read of it
// followed by the rest.
func unpeek(resp *http.Response) {
	if resp == nil {
		return
	}
	p, ok := resp.Body.(*peekBody)
	if !ok {
		return
	}
	resp.Body = p.body
	if len(p.read) > 0 {
		resp.Body = readThenClose{io.MultiReader(bytes.NewReader(p.read), p.body), p.body}
	}
}

// closeResponse closes resp's body without reading it, for when the
// handler cannot afford to wait on it.
func closeResponse(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	unpeek(resp)
	_ = resp.Body.Close()
}
