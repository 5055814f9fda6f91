package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	msgraphsdk "github.com/microsoftgraph/msgraph-sdk-go"
	msgraphgocore "github.com/microsoftgraph/msgraph-sdk-go-core"
	"github.com/microsoftgraph/msgraph-sdk-go/models"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// batchSent is one $batch attempt as it reached the server.
type batchSent struct {
	requestID    string   // client-request-id, the same on every attempt of one batch
	retryAttempt string   // Retry-Attempt
	encoding     string   // Content-Encoding
	ids          []string // the ids of the items it held, in order
}

// batchAPI is throttletest's server with mailboxRule behind a front that
// records every $batch attempt and names each batch by its
// client-request-id, which Graph's telemetry handler sets once per
// request, so that the server's Requests name every item
// "<client-request-id>/<item id>".
type batchAPI struct {
	*throttletest.Server
	front *httptest.Server
	mu    sync.Mutex
	sent  []batchSent
}

func newBatchAPI(t *testing.T) *batchAPI {
	t.Helper()
	api := &batchAPI{Server: throttletest.NewServer(throttletest.Config{Rules: []throttletest.Rule{mailboxRule()}})}
	t.Cleanup(api.Server.Close)
	api.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id := r.Header.Get("client-request-id")
		r.Header.Set(throttletest.HeaderRequestID, id)
		if r.Method == http.MethodPost && r.URL.Path == "/v1.0/$batch" {
			api.record(t, batchSent{requestID: id, retryAttempt: r.Header.Get("Retry-Attempt"), encoding: r.Header.Get("Content-Encoding")}, raw)
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(api.front.Close)
	return api
}

func (api *batchAPI) record(t *testing.T, b batchSent, raw []byte) {
	body := raw
	if b.encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			t.Errorf("batch %s: gzip body: %v", b.requestID, err)
		}
	}
	var doc struct {
		Requests []struct {
			ID string `json:"id"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Errorf("batch %s: body %q: %v", b.requestID, body, err)
	}
	for _, it := range doc.Requests {
		b.ids = append(b.ids, it.ID)
	}
	api.mu.Lock()
	api.sent = append(api.sent, b)
	api.mu.Unlock()
}

func (api *batchAPI) batches() []batchSent {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]batchSent(nil), api.sent...)
}

// items returns what the server saw of each item of the batch whose
// client-request-id is requestID, by item id.
func (api *batchAPI) items(requestID string) map[string]throttletest.Request {
	out := map[string]throttletest.Request{}
	for _, r := range api.Requests() {
		if id, ok := strings.CutPrefix(r.ID, requestID+"/"); ok {
			out[id] = r
		}
	}
	return out
}

func ids(items []msgraphgocore.BatchItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = *it.GetId()
	}
	return out
}

func is2xx(s int32) bool { return s >= 200 && s <= 299 }

// A BatchRequest's Send returns every step with its final status: the
// steps a mailbox's budget throttled, and the step that depends on one of
// them, are resent once in a batch of their own after the Retry-After;
// with completion turned off for the request, they come back as the
// server answered them.
func TestBatchRequestSend(t *testing.T) {
	tests := []struct {
		name    string
		opts    *options.RetryHandlerOptions // per request; nil: the handler's
		batches int                          // $batch attempts the server sees
	}{
		{"completed", nil, 2},
		{"completion off for the request", &options.RetryHandlerOptions{Batch: options.BatchOptions{Disabled: true}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newBatchAPI(t)
			adapter, err := newBatchAdapter(api.front.URL)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			batch := msgraphgocore.NewBatchRequest(adapter)
			mb, err := addMailboxSteps(ctx, msgraphsdk.NewGraphServiceClient(adapter), batch)
			require.NoError(t, err)
			all := ids(batch.GetRequests())
			require.Len(t, all, 20)
			inbox, profile, draft := *mb.inbox.GetId(), *mb.profile.GetId(), *mb.draft.GetId()
			if tt.opts != nil {
				ctx = context.WithValue(ctx, options.Key(), tt.opts)
			}

			resp, err := batch.Send(ctx, adapter)
			require.NoError(t, err)

			sent := api.batches()
			require.Len(t, sent, tt.batches)
			assert.Equal(t, all, sent[0].ids)
			assert.Empty(t, sent[0].retryAttempt)
			seen := api.items(sent[0].requestID)
			var throttled []string // in the order of the batch
			for _, id := range all {
				if seen[id].Throttled > 0 {
					throttled = append(throttled, id)
				}
			}
			require.Len(t, throttled, 8, "four steps on each mailbox")
			assert.Subset(t, throttled, []string{inbox, draft})
			st := api.Stats()
			assert.Equal(t, map[string]int{"mailbox": 8}, st.ThrottledBy)
			assert.Zero(t, st.Early, "no step resent before its Retry-After")

			statuses := resp.GetStatusCodes()
			require.Len(t, statuses, 20, "every step answered")
			if tt.opts != nil {
				for _, id := range all {
					switch {
					case id == profile:
						assert.EqualValues(t, http.StatusFailedDependency, statuses[id], "the profile waits on the inbox")
					case slices.Contains(throttled, id):
						assert.EqualValues(t, http.StatusTooManyRequests, statuses[id], "step %s", id)
					default:
						assert.True(t, is2xx(statuses[id]), "step %s: %d", id, statuses[id])
					}
				}
				return
			}
			for _, id := range all {
				assert.True(t, is2xx(statuses[id]), "step %s: %d", id, statuses[id])
			}
			assert.EqualValues(t, http.StatusCreated, statuses[draft])

			for _, b := range sent {
				// kiota-http-go's compression runs after the retry handler,
				// which reads and rewrites the batch uncompressed.
				assert.Equal(t, "gzip", b.encoding)
			}
			resent := sent[1]
			assert.Equal(t, sent[0].requestID, resent.requestID, "a resend is the same request")
			assert.Equal(t, "1", resent.retryAttempt)
			want := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id != profile && !slices.Contains(throttled, id) })
			assert.Equal(t, want, resent.ids, "the throttled steps and the one depending on them, in order")

			user, err := msgraphgocore.GetBatchResponseById[models.Userable](resp, profile, models.CreateUserFromDiscriminatorValue)
			require.NoError(t, err)
			assert.Equal(t, "User adele", deref(user.GetDisplayName()))
		})
	}
}

// A BatchRequestCollection sends its 45 steps as three batches, one after
// another; every step comes back with a 2xx, whatever the mailboxes'
// budgets throttled on the way.
func TestBatchRequestCollectionSend(t *testing.T) {
	api := newBatchAPI(t)
	adapter, err := newBatchAdapter(api.front.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	collection := msgraphgocore.NewBatchRequestCollection(adapter)
	require.NoError(t, addReads(ctx, msgraphsdk.NewGraphServiceClient(adapter), collection, 45, "adele", "bob", "carol"))

	resp, err := collection.Send(ctx, adapter)
	require.NoError(t, err)

	statuses := resp.GetStatusCodes()
	require.Len(t, statuses, 45)
	for id, s := range statuses {
		assert.True(t, is2xx(s), "step %s: %d", id, s)
	}
	var sizes []int
	for _, b := range api.batches() {
		if b.retryAttempt == "" {
			sizes = append(sizes, len(b.ids))
		}
	}
	assert.Equal(t, []int{19, 19, 7}, sizes, "first attempts")
	st := api.Stats()
	assert.Positive(t, st.Throttled, "some steps were throttled and resent")
	assert.Equal(t, 45+st.Throttled, st.Attempts, "each throttled step resent, nothing else")
	assert.Zero(t, st.Early)
}

// What make example prints of the batches: every step 2xx, some resent,
// none early.
func TestPrintBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	require.NoError(t, printBatches(ctx, &out))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 3, out.String())
	assert.Equal(t, "BatchRequest, 20 steps on two mailboxes: 19 answered 200, 1 answered 201", lines[0])
	assert.Equal(t, "BatchRequestCollection, 45 steps in 3 batches: 45 answered 200", lines[1])
	var attempts, throttled, early int
	_, err := fmt.Sscanf(lines[2], "server: %d item attempts, %d answered 429 and resent, %d resent early", &attempts, &throttled, &early)
	require.NoError(t, err, lines[2])
	// The profile's first answer, a 424, is the server's without an attempt;
	// its resend is one.
	assert.Equal(t, 65+throttled, attempts, "each throttled item resent, nothing else")
	assert.Positive(t, throttled)
	assert.Zero(t, early)
}
