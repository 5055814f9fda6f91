package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/internal/realproxy"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// A schedule is when each request of a verification run is sent, as
// offsets from the run's start, in order.
type schedule struct {
	name  string
	times []time.Duration
}

// modelCheck is one real limiter, the throttletest model of it, and the
// schedules it is checked with.
type modelCheck struct {
	name      string
	start     func(origin string) (*realproxy.Proxy, error)
	model     func() throttletest.Limiter
	floor     time.Duration // the physical limit of the schedules' requests, which the first approaches from below the rate
	schedules []schedule
}

// verifyRate, verifyBurst and verifyN size the checks: the defaults of the
// benchmark's scenarios, and half its workload so that a check takes
// seconds.
const (
	verifyRate  = 400
	verifyBurst = 40
	verifyN     = 1000
)

func modelChecks() []modelCheck {
	interval := time.Second / verifyRate
	// paced sends first requests at once, then one every interval from
	// from on, plus a millisecond so that the limiter's clock, which
	// counts whole milliseconds, never reads the time before it.
	paced := func(name string, first int, from, every time.Duration, n int) schedule {
		s := schedule{name: name}
		for k := range n {
			if k < first {
				s.times = append(s.times, 0)
				continue
			}
			s.times = append(s.times, from+time.Duration(k-first+1)*every+time.Millisecond)
		}
		return s
	}
	rng := rand.New(rand.NewPCG(20, 8))
	poisson := func(name string, rate float64, n int) schedule {
		s := schedule{name: name}
		var t time.Duration
		for range n {
			t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			s.times = append(s.times, t)
		}
		return s
	}
	bursts := func(name string, size int, every time.Duration, n int) schedule {
		s := schedule{name: name}
		for k := range n {
			s.times = append(s.times, time.Duration(k/size)*every)
		}
		return s
	}
	return []modelCheck{
		{
			name: fmt.Sprintf("nginx limit_req %dr/s burst=%d nodelay", verifyRate, verifyBurst),
			start: func(origin string) (*realproxy.Proxy, error) {
				return realproxy.StartNginx(realproxy.Nginx{Origin: origin, Zones: []realproxy.Zone{{Location: "/", Rate: verifyRate, Burst: verifyBurst}}, Status: 429})
			},
			model: func() throttletest.Limiter {
				mk := orPanic(throttletest.LimitReqLimiter(throttletest.LimitReq{Rate: verifyRate, Burst: verifyBurst}))
				return mk("", time.Now())
			},
			floor: realproxy.LimitReqFloor(verifyN, verifyRate, verifyBurst),
			schedules: []schedule{
				paced("burst+1, then 2 % below the rate", verifyBurst+1, 0, interval*102/100, verifyN),
				paced("burst+1, then the rate", verifyBurst+1, 0, interval, verifyN),
				paced("burst+1, then 5 % above the rate", verifyBurst+1, 0, interval*95/100, verifyN),
				poisson("Poisson at twice the rate", 2*verifyRate, verifyN),
				bursts("100 at once every 200 ms", 100, 200*time.Millisecond, verifyN),
			},
		},
		{
			name: fmt.Sprintf("HAProxy http_req_rate(1s) gt %d", verifyRate),
			start: func(origin string) (*realproxy.Proxy, error) {
				return realproxy.StartHAProxy(realproxy.HAProxy{Origin: origin, Limit: verifyRate})
			},
			model: func() throttletest.Limiter {
				mk := orPanic(throttletest.StickTableLimiter(throttletest.StickTable{Limit: verifyRate, Period: time.Second}))
				return mk("", time.Now())
			},
			floor: realproxy.StickTableFloor(verifyN, verifyRate, time.Second),
			schedules: []schedule{
				paced("the limit, then 2 % below the rate after the first second", verifyRate, time.Second, interval*102/100, verifyN),
				paced("the limit, then the rate after the first second", verifyRate, time.Second, interval, verifyN),
				paced("the limit, then the rate after 0.9 s", verifyRate, 900*time.Millisecond, interval, verifyN),
				poisson("Poisson at twice the rate", 2*verifyRate, verifyN),
				bursts("100 at once every 200 ms", 100, 200*time.Millisecond, verifyN),
			},
		},
	}
}

// sent is one request of a verification run: when it left and whether the
// limiter admitted it.
type sent struct {
	at       time.Time
	admitted bool
}

// verifyModels sends every schedule to each real limiter, replays the
// send times against its model, and writes how often the two agree.
func verifyModels(w io.Writer) error {
	fmt.Fprintln(w, "| limiter | schedule | requests | admitted (real) | admitted (model) | same answer | same answer, best clock phase | admitted per 100 ms, differing | last admitted (real) | physical limit |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, mc := range modelChecks() {
		for k, sch := range mc.schedules {
			real, start, err := sendSchedule(mc, sch)
			if err != nil {
				return err
			}
			r := replay(mc, real, start, 0)
			best := r
			for phase := 100 * time.Microsecond; phase < time.Millisecond; phase += 100 * time.Microsecond {
				if rp := replay(mc, real, start, phase); rp.same > best.same {
					best = rp
				}
			}
			floor := "-"
			if k == 0 {
				floor = secs(mc.floor)
			}
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.1f %% | %.1f %% | %.1f %% | %s | %s |\n", mc.name, sch.name, len(real), r.realOK, r.modelOK,
				pct(r.same, len(real)), pct(best.same, len(real)), pct(r.binDiff, r.realOK), secs(r.lastOK), floor)
		}
	}
	return nil
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }

// replayed is how a model answered the requests of a real run.
type replayed struct {
	realOK, modelOK int
	same            int           // requests the model answered as the real limiter did
	binDiff         int           // Σ |admitted real − admitted model| over 100 ms bins
	lastOK          time.Duration // when the last request the real limiter admitted left, from the schedule's start
}

// replay runs the requests of a real run through a fresh model in the
// order they left, at the times they left shifted by phase: the real
// limiter counts whole milliseconds of a clock whose millisecond boundaries
// need not fall where the Unix clock's do.
func replay(mc modelCheck, real []sent, start time.Time, phase time.Duration) replayed {
	order := make([]int, len(real))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return real[a].at.Compare(real[b].at) })
	model := mc.model()
	const bin = 100 * time.Millisecond
	bins := map[int64]int{}
	var r replayed
	for _, i := range order {
		at := real[i].at.Add(phase)
		b := int64(real[i].at.Sub(start) / bin)
		ok := model.Wait(at, 1) == 0
		if ok {
			model.Take(at, 1)
			r.modelOK++
			bins[b]--
		} else if rf, isRefuser := model.(throttletest.Refuser); isRefuser {
			rf.Refuse(at, 1)
		}
		if real[i].admitted {
			r.realOK++
			bins[b]++
			r.lastOK = max(r.lastOK, real[i].at.Sub(start))
		}
		if ok == real[i].admitted {
			r.same++
		}
	}
	for _, d := range bins {
		r.binDiff += max(d, -d)
	}
	return r
}

// sendSchedule starts a fresh limiter and sends sch through it, each
// request at its time from a goroutine of its own, and notes when each left
// and whether it was admitted. It returns the schedule's start too.
func sendSchedule(mc modelCheck, sch schedule) ([]sent, time.Time, error) {
	srv := throttletest.NewServer(throttletest.Config{})
	defer srv.Close()
	px, err := mc.start(srv.URL)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer px.Close()
	tr := newBaseTransport(len(sch.times))
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out := make([]sent, len(sch.times))
	errs := make([]error, len(sch.times))
	var wg sync.WaitGroup
	start := time.Now()
	for i, at := range sch.times {
		time.Sleep(time.Until(start.Add(at)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The time the request was written, after any dial, is the
			// one the limiter sees, a loopback hop later.
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { out[i].at = time.Now() }}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, px.URL+"/v1.0/users/1", nil)
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			out[i].admitted = resp.StatusCode == http.StatusOK
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, start, fmt.Errorf("%s, %s, request %d: %w", mc.name, sch.name, i, err)
		}
	}
	return out, start, nil
}
