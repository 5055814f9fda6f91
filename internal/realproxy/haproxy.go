package realproxy

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// HAProxy configures an HAProxy in front of Origin that refuses a client
// whose request rate over the last Period, as a stick-table's
// http_req_rate counter estimates it, is above Limit.
type HAProxy struct {
	// Origin is the base URL of the server HAProxy proxies to.
	Origin string
	// Limit is the most requests per Period a client address may send.
	Limit int
	// Period is the counter's period, in whole milliseconds. 0: 1 s.
	Period time.Duration
	// Status is the status of a refusal. 0: 429.
	Status int
	// RetryAfter is the Retry-After value a refusal carries, "" for none.
	RetryAfter string
}

func (h HAProxy) validate() error {
	u, err := url.Parse(h.Origin)
	switch {
	case err != nil || u.Scheme != "http" || u.Host == "":
		return fmt.Errorf("realproxy: HAProxy.Origin = %q must be an http URL", h.Origin)
	case h.Limit < 1:
		return fmt.Errorf("realproxy: HAProxy.Limit = %d must be at least 1", h.Limit)
	case h.Period < 0 || h.Period%time.Millisecond != 0:
		return fmt.Errorf("realproxy: HAProxy.Period = %v must be a non-negative whole number of milliseconds", h.Period)
	case h.Status != 0 && (h.Status < 400 || h.Status > 599):
		return fmt.Errorf("realproxy: HAProxy.Status = %d must be 0 or an error status", h.Status)
	case strings.ContainsAny(h.RetryAfter, " \"'\\\r\n"):
		return fmt.Errorf("realproxy: HAProxy.RetryAfter = %q must be one token", h.RetryAfter)
	}
	return nil
}

// haproxyConf tracks every request of a client address in a stick table
// and counts it, refused ones included (track-sc0 counts the request when
// tracking starts, before the deny rule reads the rate), which is how
// HAProxy's rate limiting is documented and deployed.
var haproxyConf = template.Must(template.New("haproxy.cfg").Parse(`global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-keep-alive
frontend limited
    bind 127.0.0.1:{{.Port}}
    stick-table type ip size 100k expire 60s store http_req_rate({{.PeriodMs}}ms)
    http-request track-sc0 src
    http-request deny deny_status {{.Status}}{{if .RetryAfter}} hdr Retry-After {{.RetryAfter}}{{end}} if { sc_http_req_rate(0) gt {{.Limit}} }
    default_backend origin
backend origin
    http-reuse always
    server origin {{.OriginHost}}
`))

// StartHAProxy writes cfg's configuration into a new temporary directory
// and runs haproxy on it in the foreground (`haproxy -db -f DIR/haproxy.cfg`)
// on a free port of 127.0.0.1. It returns an error wrapping ErrNotInstalled
// when haproxy is not found.
func StartHAProxy(cfg HAProxy) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	binary, port, dir, err := prepare("haproxy")
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.Origin)
	period, status := cfg.Period, cfg.Status
	if period == 0 {
		period = time.Second
	}
	if status == 0 {
		status = 429
	}
	conf := filepath.Join(dir, "haproxy.cfg")
	if err := writeTemplate(conf, haproxyConf, map[string]any{
		"Port": port, "OriginHost": u.Host, "Limit": cfg.Limit, "PeriodMs": period.Milliseconds(),
		"Status": status, "RetryAfter": cfg.RetryAfter,
	}); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return start("haproxy", binary, dir, port, "-db", "-f", conf)
}

// StickTableFloor is the least time an HAProxy that refuses above limit
// requests per period takes to admit n requests from one client: limit at
// once, as the first period's counter fills, then nothing until that period
// ends (the estimate is the current period's count alone), then limit per
// period, as the previous period's share of the estimate drains with the
// time left in the current one (freq_ctr_total: prev·remain/period + curr).
// So n requests take n/limit periods, the first limit of them at once.
func StickTableFloor(n, limit int, period time.Duration) time.Duration {
	if n <= limit {
		return 0
	}
	return time.Duration(float64(n) / float64(limit) * float64(period))
}
