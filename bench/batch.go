package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// batchSize is the number of items per JSON batch, Graph's maximum.
const batchSize = 20

// mailboxes is the number of mailboxes the batch workload's items are
// spread over, each with a budget of its own.
const mailboxes = 10

// batchOutcome is what the workload saw of one batch.
type batchOutcome struct {
	items     int
	completed int // items whose answer in the batch the workload got is a 2xx
	err       error
	latency   time.Duration
	done      time.Duration // since the run started
}

// runBatch drives the p.n items of a batch scenario, in batches of
// batchSize from up to p.c workers, through a fresh client against a fresh
// server, and measures per item: a request of the result is an item, and
// it succeeded when the batch the application got back answers it with a
// 2xx. Latencies are those of whole batches.
func runBatch(cl client, sc scenario, method string, p params) (result, error) {
	res := result{client: cl, scenario: sc, method: method, p: p, limit: sc.limit(p)}
	rg, err := newRig(cl, sc, p)
	if err != nil {
		return res, err
	}
	defer rg.close()
	srv, base, counting, hc, before := rg.srv, rg.base, rg.counting, rg.hc, rg.before

	ctx, cancel := context.WithTimeout(context.Background(), p.runTimeout)
	defer cancel()
	batches := (p.n + batchSize - 1) / batchSize
	outcomes := make([]batchOutcome, batches)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(p.c, batches) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := int(next.Add(1)) - 1
				if b >= batches {
					return
				}
				outcomes[b] = sendBatch(ctx, hc, srv, method, b, p, start)
			}
		}()
	}
	wg.Wait()
	res.wall = time.Since(start)
	base.CloseIdleConnections()
	res.goroutines = settle(before) - before
	res.leaked = counting.leaked()

	latencies := make([]time.Duration, 0, batches)
	for _, o := range outcomes {
		latencies = append(latencies, o.latency)
		if o.err != nil {
			res.errored += o.items
			if res.firstErr == "" {
				res.firstErr = o.err.Error()
			}
			continue
		}
		res.succeeded += o.completed
		res.failed += o.items - o.completed
		for range o.completed {
			res.completions = append(res.completions, o.done)
		}
	}
	slices.Sort(res.completions)
	res.p50, res.p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	st := srv.Stats()
	res.attempts, res.throttled, res.early = st.Attempts, st.Throttled, st.Early
	return res, nil
}

// sendBatch sends batch b once, as an application would, and counts the
// items its answer completes.
func sendBatch(ctx context.Context, hc *http.Client, srv *throttletest.Server, method string, b int, p params, start time.Time) batchOutcome {
	first, last := b*batchSize, min(p.n, (b+1)*batchSize)
	o := batchOutcome{items: last - first}
	ctx, cancel := context.WithTimeout(ctx, p.reqTimeout)
	defer cancel()
	body, err := json.Marshal(struct {
		Requests []batchItem `json:"requests"`
	}{batchItems(method, first, last)})
	if err != nil {
		o.err = err
		return o
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1.0/$batch", bytes.NewReader(body))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(throttletest.HeaderRequestID, "batch-"+strconv.Itoa(b))
	issued := time.Now()
	resp, err := hc.Do(req)
	if err == nil {
		o.completed, err = completedItems(resp)
	}
	done := time.Now()
	o.err, o.latency, o.done = err, done.Sub(issued), done.Sub(start)
	return o
}

// batchItem is one request of a JSON batch.
type batchItem struct {
	ID      string            `json:"id"`
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
}

// batchItems returns items first to last-1: a GET reads message i of
// mailbox i mod mailboxes, a POST creates one there.
func batchItems(method string, first, last int) []batchItem {
	items := make([]batchItem, 0, last-first)
	for i := first; i < last; i++ {
		it := batchItem{ID: strconv.Itoa(i), Method: method, URL: fmt.Sprintf("/users/mbx%d/messages", i%mailboxes)}
		if method == http.MethodGet {
			it.URL += "/" + strconv.Itoa(i)
		} else {
			it.Headers = map[string]string{"Content-Type": "application/json"}
			it.Body = fmt.Appendf(nil, `{"subject":"Report %d"}`, i)
		}
		items = append(items, it)
	}
	return items
}

// completedItems reads and closes a batch response and counts its items
// answered with a 2xx; a response that is not a 200 batch completes none.
func completedItems(resp *http.Response) (int, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, err
	}
	var doc struct {
		Responses []struct {
			Status int `json:"status"`
		} `json:"responses"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, fmt.Errorf("batch response: %w", err)
	}
	n := 0
	for _, a := range doc.Responses {
		if a.Status >= 200 && a.Status < 300 {
			n++
		}
	}
	return n, nil
}

// mailboxRule gives every mailbox (/v1.0/users/{id}/...) a token bucket
// with its share of the scenario's rate, holding one second of it: Outlook
// limits each mailbox over a window of minutes, so what accrues while a
// client waits out a whole-second Retry-After can be spent when it comes
// back.
func mailboxRule(p params) throttletest.Rule {
	return throttletest.Rule{
		Name: "mailbox",
		Match: func(r *http.Request) (string, bool) {
			const prefix = "/v1.0/users/"
			path := r.URL.Path
			if len(path) <= len(prefix) || path[:len(prefix)] != prefix {
				return "", false
			}
			rest := path[len(prefix):]
			for i := range len(rest) {
				if rest[i] == '/' {
					return rest[:i], true
				}
			}
			return rest, true
		},
		Limiter: throttletest.BucketLimiter(throttletest.Bucket{Rate: p.rate / mailboxes, Burst: max(1, int(p.rate/mailboxes))}),
	}
}
