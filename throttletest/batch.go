package throttletest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// MaxBatchItems is the most items a JSON batch may hold, as on Graph.
const MaxBatchItems = 20

// isBatch reports whether r is a JSON batch request: a POST to
// {service root}/$batch.
func isBatch(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/$batch")
}

// batchItem is one request of a JSON batch.
type batchItem struct {
	ID        string            `json:"id"`
	Method    string            `json:"method"`
	URL       string            `json:"url"`
	DependsOn []string          `json:"dependsOn,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Body      json.RawMessage   `json:"body,omitempty"`
}

// batchAnswer is one answer of a JSON batch response.
type batchAnswer struct {
	ID      string            `json:"id"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    any               `json:"body,omitempty"`
}

// serveBatch answers a JSON batch the way Graph does: 200 with an answer
// per item, each item's request evaluated against the server's budgets,
// outage and failure rate as if it had been sent alone; 424 Failed
// Dependency for an item that depends on one that did not succeed; the
// answers in an order of the server's choosing. Each item is a logical
// request of its own, named by the batch's X-Request-Id, a slash and the
// item's id, so that Requests shows what every item went through; Stats
// count the items, not the batch. A body
// that is not a batch of at most MaxBatchItems items is answered 400.
func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request, body []byte) {
	var doc struct {
		Requests []batchItem `json:"requests"`
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Requests) == 0 || len(doc.Requests) > MaxBatchItems {
		w.WriteHeader(http.StatusBadRequest)
		msg := "The batch must hold 1 to " + strconv.Itoa(MaxBatchItems) + " requests."
		if err != nil {
			msg = "The batch is not valid JSON: " + err.Error()
		}
		writeJSON(w, graphError{Error: graphErrorBody{Code: "BadRequest", Message: msg}})
		return
	}
	root := strings.TrimSuffix(r.URL.Path, "$batch")
	batchID := r.Header.Get(HeaderRequestID)
	host := hostname(r.Host)
	status := make(map[string]int, len(doc.Requests))
	answers := make([]batchAnswer, 0, len(doc.Requests))
	for _, it := range doc.Requests {
		a := batchAnswer{ID: it.ID}
		if failed := failedDependency(it, status); failed {
			a.Status = http.StatusFailedDependency
			a.Body = graphError{Error: graphErrorBody{Code: "FailedDependency", Message: "A request this one depends on failed."}}
		} else {
			a = s.serveItem(r, root, host, batchID, it)
		}
		status[it.ID] = a.Status
		answers = append(answers, a)
	}
	s.mu.Lock()
	// Graph does not keep the request's order: neither does the server.
	for i := len(answers) - 1; i > 0; i-- {
		j := int(s.rand() * float64(i+1))
		answers[i], answers[j] = answers[j], answers[i]
	}
	s.mu.Unlock()
	writeJSON(w, struct {
		Responses []batchAnswer `json:"responses"`
	}{answers})
}

// failedDependency reports whether an item depends on one that was not
// answered with success, or on none the batch holds before it.
func failedDependency(it batchItem, status map[string]int) bool {
	for _, d := range it.DependsOn {
		if s, ok := status[d]; !ok || s < 200 || s > 299 {
			return true
		}
	}
	return false
}

// serveItem evaluates one item as the request it stands for.
func (s *Server) serveItem(batch *http.Request, root, host, batchID string, it batchItem) batchAnswer {
	u, err := url.Parse(it.URL)
	if err != nil || it.Method == "" {
		return batchAnswer{ID: it.ID, Status: http.StatusBadRequest,
			Body: graphError{Error: graphErrorBody{Code: "BadRequest", Message: "The item needs a method and a valid url."}}}
	}
	path := u.Path
	if !u.IsAbs() {
		path = root + strings.TrimPrefix(u.Path, "/")
	}
	req := &http.Request{
		Method: strings.ToUpper(it.Method), Host: batch.Host, Header: http.Header{},
		URL: &url.URL{Scheme: "http", Host: batch.Host, Path: path, RawQuery: u.RawQuery},
	}
	for k, v := range it.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Del(HeaderRequestID)
	if batchID != "" {
		req.Header.Set(HeaderRequestID, batchID+"/"+it.ID)
	}
	a := s.account(req, host, s.now(), false)
	out := batchAnswer{ID: it.ID, Status: a.status}
	switch a.status {
	case http.StatusServiceUnavailable:
		out.Body = graphError{Error: graphErrorBody{Code: "serviceNotAvailable", Message: "The service is temporarily unavailable."}}
	case http.StatusTooManyRequests:
		ra := strconv.FormatInt(a.retryAfter, 10)
		out.Headers = map[string]string{"Retry-After": ra}
		out.Body = graphError{Error: graphErrorBody{Code: "TooManyRequests", Message: "Too many requests. Retry after " + ra + " s."}}
	default:
		out.Headers = map[string]string{"Content-Type": "application/json"}
		out.Body = user{ID: lastSegment(path), DisplayName: "User " + lastSegment(path)}
	}
	return out
}
