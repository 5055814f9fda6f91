package middleware_test

import (
	"math"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/clocktest"
	"github.com/kiota-resilience/kiota-resilience-go/internal/effective"
	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// FuzzRetryDelay drives a whole request through RetryHandler.Intercept
// with a scripted pipeline and a clock that jumps instead of waiting, and
// checks every wait against a model of the handler's rules: the policy's
// delay, raised to the server's Retry-After, refused when MaxRetries,
// MaxElapsed or RetriesTimeLimit would be passed. No wait is negative,
// none is shorter than Retry-After, the limits are never overrun (the model
// adds in big integers, so an overflow in the handler shows as a mismatch),
// and the handler stops exactly when the model does.
func FuzzRetryDelay(f *testing.F) {
	type seed struct {
		maxRetries                               int
		initial, maxDelay, maxElapsed, timeLimit int64
		policyKind                               uint8
		policyRetries                            int
		policyDelay                              int64
		policyOK                                 bool
		random                                   float64
		status                                   int
		failures                                 uint8
		step                                     int64
		retryAfter, retryAfterMs                 string
	}
	s, ms := int64(time.Second), int64(time.Millisecond)
	for _, c := range []seed{
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0.5, 429, 3, 20 * ms, "", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 503, 20, 0, "", ""},
		{3, 0, 0, 0, 0, 0, 0, 0, true, 0.999, 429, 5, 0, "0", ""},
		{-1, 0, 0, 0, 0, 0, 0, 0, true, 0.5, 429, 1, 0, "", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 429, 2, 0, "86400", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 429, 2, 0, "Wed, 04 Mar 2026 05:36:07 GMT", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 429, 2, 0, "Wed, 04 Mar 2026 05:36:06 GMT", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 429, 2, 0, "Wed, 04 Mar 2026 05:06:00 GMT", ""},
		{0, 0, 0, 0, 30 * s, 0, 0, 0, true, 0, 503, 5, 0, "10", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 504, 2, 0, "", "1500"},
		{0, 0, 0, 3*s - 1, 0, 0, 0, 0, true, 0, 429, 2, 0, "", ""},
		{0, 0, 0, 3 * s, 0, 0, 0, 0, true, 0, 429, 2, 0, "", ""},
		{0, 0, 0, 0, 15*s - 1, 0, 0, 0, true, 0, 429, 3, 0, "", ""},
		{0, 0, 0, 0, 15 * s, 0, 0, 0, true, 0, 429, 3, 0, "", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, 0, 500, 2, 0, "1", ""},
		{0, s, 2 * s, 10 * s, 0, 1, 4, 0, true, 0.3, 429, 6, 100 * ms, "", ""},
		{5, 0, 0, 0, 0, 2, 0, -5 * s, true, 0, 429, 6, 0, "", ""},
		{5, 0, 0, 0, 0, 2, 0, math.MaxInt64, true, 0, 429, 6, 0, "", ""},
		{5, 0, 0, math.MaxInt64, math.MaxInt64, 2, 0, math.MaxInt64 - 1, true, 0, 429, 6, math.MaxInt64, "", ""},
		{5, 0, 0, 0, 0, 2, 0, 7 * s, false, 0, 429, 6, 0, "", ""},
		{5, 0, 0, 0, 7 * s, 2, 0, -5 * s, true, 0, 429, 6, 0, "", ""},
		{0, 0, 0, 0, 0, 0, 0, 0, true, math.NaN(), 429, 3, 0, "99999999999999999999", "9223372036854775807"},
		{0, 0, 0, math.MaxInt64, 0, 0, 0, 0, true, math.Inf(1), 429, 3, math.MaxInt64, "9223372036", ""},
		{0, math.MaxInt64, math.MaxInt64, math.MaxInt64, 0, 1, math.MaxInt32, 0, true, -1, 429, 12, 1, "", ""},
	} {
		f.Add(c.maxRetries, c.initial, c.maxDelay, c.maxElapsed, c.timeLimit, c.policyKind, c.policyRetries,
			c.policyDelay, c.policyOK, c.random, c.status, c.failures, c.step, c.retryAfter, c.retryAfterMs)
	}
	f.Fuzz(func(t *testing.T, maxRetries int, initial, maxDelay, maxElapsed, timeLimit int64,
		policyKind uint8, policyRetries int, policyDelay int64, policyOK bool, random float64,
		status int, failures uint8, step int64, retryAfter, retryAfterMs string) {
		clock := clocktest.NewJumping(fuzzNow)
		opts := options.RetryHandlerOptions{
			MaxRetries:       maxRetries,
			InitialDelay:     time.Duration(initial),
			MaxDelay:         time.Duration(maxDelay),
			MaxElapsed:       time.Duration(maxElapsed),
			RetriesTimeLimit: time.Duration(timeLimit),
			Clock:            clock,
			// The model is of the delay rules alone; the queue's holds are
			// tested on their own.
			Queue: options.QueueOptions{Disabled: true},
		}
		switch policyKind % 3 {
		case 1:
			opts.Policy = options.Exponential{Retries: policyRetries, InitialDelay: time.Duration(initial),
				MaxDelay: time.Duration(maxDelay), Random: func() float64 { return random }}
		case 2:
			// Alternate the sign so that a negative delay also meets the
			// RetriesTimeLimit accounting.
			opts.Policy = options.PolicyFunc(func(a options.Attempt) (time.Duration, bool) {
				if a.Retry%2 == 0 {
					return time.Duration(-policyDelay), policyOK
				}
				return time.Duration(policyDelay), policyOK
			})
		default:
			// nil: the default backoff, validated as such and pinned below.
			opts.Policy = nil
		}
		h, err := middleware.NewRetryHandler(opts)
		if err != nil {
			require.ErrorIs(t, err, options.ErrInvalidOption)
			return
		}
		if opts.Policy == nil {
			// The default backoff draws its jitter from math/rand: rebuild
			// the handler around the same policy value with a pinned
			// source (and the default MaxRetries it implies), so that the
			// model can ask it for the same delays.
			p := effective.Policy(&opts).(options.Exponential)
			p.Random = func() float64 { return random }
			opts.Policy = p
			if opts.MaxRetries == 0 {
				opts.MaxRetries = options.DefaultMaxRetries
			}
			h, err = middleware.NewRetryHandler(opts)
			require.NoError(t, err)
		}
		if status < 100 || status > 599 {
			status = []int{429, 503, 504, 500, 404}[uint(status)%5]
		}
		nFail := int(failures % 13)
		header := http.Header{}
		if retryAfter != "" {
			header.Set("Retry-After", retryAfter)
		}
		if retryAfterMs != "" {
			header.Set("Retry-After-Ms", retryAfterMs)
		}
		step = max(step, -step, 0) // an attempt takes no negative time

		p := &scriptedPipeline{clock: clock, status: status, failures: nFail, header: header, step: time.Duration(step)}
		req, err := http.NewRequest(http.MethodGet, "http://fuzz.test/items", nil)
		require.NoError(t, err)
		resp, err := h.Intercept(p, 0, req)
		require.NoError(t, err)
		require.NotNil(t, resp)

		// The model.
		want := modelRun(t, &opts, status, nFail, header, time.Duration(step))
		require.Equal(t, want.attempts, len(p.starts), "attempts")
		require.Equal(t, want.status, resp.StatusCode)
		for i, d := range want.delays {
			got := p.starts[i+1].Sub(p.ends[i])
			require.GreaterOrEqual(t, got, time.Duration(0), "negative wait before retry %d", i+1)
			require.Equal(t, d, got, "wait before retry %d", i+1)
		}
	})
}

type modelResult struct {
	attempts int
	status   int
	delays   []time.Duration
}

// modelRun replays the handler's rules for a run against the scripted
// pipeline, with limits checked in big integers.
func modelRun(t *testing.T, opts *options.RetryHandlerOptions, status, nFail int, header http.Header, step time.Duration) modelResult {
	limits := effective.LimitsOf(opts)
	policy := effective.Policy(opts)
	retryable := effective.Retryable(opts, status)
	start := fuzzNow
	now := start
	waited := new(big.Int)
	var out modelResult
	for n := 1; ; n++ {
		now = now.Add(step)
		out.attempts = n
		if n > nFail {
			out.status = http.StatusOK
			return out
		}
		out.status = status
		if !retryable {
			return out
		}
		if limits.MaxRetries < 0 || limits.MaxRetries > 0 && n > limits.MaxRetries {
			return out
		}
		elapsed := now.Sub(start)
		ra, has := middleware.RetryAfter(header, now)
		require.GreaterOrEqual(t, ra, time.Duration(0))
		d, ok := policy.Next(options.Attempt{Retry: n, Elapsed: elapsed, RetryAfter: ra, HasRetryAfter: has})
		if !ok {
			return out
		}
		d = max(d, ra) // never before the server's time, never negative
		if sum(elapsed, d).Cmp(big.NewInt(int64(limits.MaxElapsed))) > 0 {
			return out
		}
		if limits.RetriesTimeLimit > 0 && new(big.Int).Add(waited, big.NewInt(int64(d))).Cmp(big.NewInt(int64(limits.RetriesTimeLimit))) > 0 {
			return out
		}
		waited.Add(waited, big.NewInt(int64(d)))
		out.delays = append(out.delays, d)
		now = now.Add(d)
	}
}

func sum(a, b time.Duration) *big.Int {
	return new(big.Int).Add(big.NewInt(int64(a)), big.NewInt(int64(b)))
}

// scriptedPipeline answers the first failures attempts with status and
// header, then 200. Each attempt takes step on the clock; it records when
// each attempt started and ended.
type scriptedPipeline struct {
	clock    *clocktest.Jumping
	status   int
	failures int
	header   http.Header
	step     time.Duration
	starts   []time.Time
	ends     []time.Time
}

func (p *scriptedPipeline) Next(req *http.Request, _ int) (*http.Response, error) {
	p.starts = append(p.starts, p.clock.Now())
	p.clock.Advance(p.step)
	p.ends = append(p.ends, p.clock.Now())
	if len(p.starts) > p.failures {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}
	return &http.Response{StatusCode: p.status, Header: p.header.Clone(), Body: http.NoBody, Request: req}, nil
}
