package throttletest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConcurrentLimiter(t *testing.T) {
	l := Concurrent(2)("mailbox", epoch)
	steps := []struct {
		op   string // "take", "release" or "wait"
		want time.Duration
	}{
		{"wait", 0}, {"take", 0}, {"wait", 0}, {"take", 0},
		{"wait", busyWait}, // a third at once is refused
		{"release", 0}, {"wait", 0}, {"take", 0}, {"wait", busyWait},
		{"release", 0}, {"release", 0}, {"release", 0}, // one too many frees nothing below zero
		{"take", 0}, {"take", 0}, {"wait", busyWait},
	}
	for i, s := range steps {
		switch s.op {
		case "take":
			l.Take(epoch, 1)
		case "release":
			l.(Releaser).Release(epoch, 1)
		case "wait":
			assert.Equal(t, s.want, l.Wait(epoch, 1), "step %d", i)
		}
	}
}

// A server that serves two requests at once per mailbox refuses a third
// sent while two are being served, with Graph's Retry-After of a second,
// and serves it once one of them is.
func TestServerConcurrent(t *testing.T) {
	perMailbox := func(r *http.Request) (string, bool) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1.0/users/")
		id, _, _ := strings.Cut(rest, "/")
		return id, ok
	}
	h := newHarness(t, Config{
		Rules:     []Rule{{Name: "mailbox", Match: perMailbox, Limiter: Concurrent(2)}},
		ServeTime: time.Minute, // until the test cancels them
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan int, 3)
	send := func(mailbox string) {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/v1.0/users/"+mailbox+"/messages", nil)
			resp, err := h.client.Do(req)
			if err == nil {
				resp.Body.Close()
				served <- resp.StatusCode
				return
			}
			served <- 0
		}()
	}
	send("a")
	send("a")
	require.Eventually(t, func() bool { return h.srv.Stats().Attempts == 2 }, 10*time.Second, time.Millisecond)
	got := h.do(http.MethodGet, h.srv.URL+"/v1.0/users/a/messages", "")
	assert.Equal(t, http.StatusTooManyRequests, got.status, "a third to the mailbox at once")
	assert.Equal(t, "1", got.retryAfter)
	send("b")
	require.Eventually(t, func() bool { return h.srv.Stats().Attempts == 4 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, h.srv.Stats().Throttled, "another mailbox has slots of its own")
	cancel()
	for range 3 {
		<-served
	}
	require.Eventually(t, func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		return h.srv.rules[0].limiters["a"].(*concurrency).inflight == 0
	}, 10*time.Second, time.Millisecond, "the slots the canceled requests held are free")
}
