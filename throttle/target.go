package throttle

import (
	"net/http"
	"strings"
)

// target is what the matching rules look at in a request.
type target struct {
	host string
	url  string
	path string
	// segs are the path's segments below the service root: for Graph's
	// /v1.0/users/{id}/messages, users, {id} and messages.
	segs []string
}

// hostKey returns the authority the request names: its Host header when
// set, so that virtual hosts on one address keep apart, else its URL's
// host. It is normalised as RFC 9110 §4.2.3 compares authorities: host
// names are case-insensitive and the scheme's default port (or an empty
// one) is the same as none, so TENANT-A.example and tenant-a.example:80
// are one host over http. A key already in normal form is returned as is.
func hostKey(req *http.Request) string {
	h := req.Host
	if h == "" {
		h = req.URL.Host
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		switch port := h[i+1:]; {
		case port == "",
			port == "80" && strings.EqualFold(req.URL.Scheme, "http"),
			port == "443" && strings.EqualFold(req.URL.Scheme, "https"):
			h = h[:i]
		}
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

func (q *Queue) newTarget(req *http.Request) *target {
	u := req.URL
	t := q.pathTarget(hostKey(req), u.Path)
	if u.RawQuery != "" {
		t.url = u.Path + "?" + u.RawQuery
	}
	return t
}

// pathTarget returns the target of path on host, with no query.
func (q *Queue) pathTarget(host, path string) *target {
	return &target{host: host, path: path, url: path, segs: q.segments(path)}
}

// belowRoot returns what follows the longest of the queue's roots that
// path starts with, and true; without one, path and false.
func (q *Queue) belowRoot(path string) (rest string, rooted bool) {
	for _, root := range q.roots {
		if r, ok := strings.CutPrefix(path, root); ok && (r == "" || r[0] == '/') {
			return r, true
		}
	}
	return path, false
}

// segments returns the segments of path below its service root: below the
// longest of the queue's roots that path starts with or, without one, below
// a leading version segment.
func (q *Queue) segments(path string) []string {
	rest, rooted := q.belowRoot(path)
	var segs []string
	for s := range strings.SplitSeq(rest, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	if !rooted && len(segs) > 0 && isVersion(segs[0]) {
		segs = segs[1:]
	}
	return segs
}

// api returns the first segment of path below its service root, the
// first of segments, without allocating: the API the path belongs to.
func (q *Queue) api(path string) string {
	rest, rooted := q.belowRoot(path)
	for rest != "" {
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		switch {
		case seg == "":
		case !rooted && isVersion(seg):
			rooted = true
		default:
			return seg
		}
	}
	return ""
}

// isVersion reports whether seg names an API version, as Graph's v1.0 and
// beta do: "beta", or "v" followed by numbers separated by dots (v1, v2.1).
func isVersion(seg string) bool {
	if seg == "beta" {
		return true
	}
	rest, ok := strings.CutPrefix(seg, "v")
	if !ok || rest == "" {
		return false
	}
	digits := 0
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && digits > 0 && i < len(rest)-1:
			digits = 0
		default:
			return false
		}
	}
	return digits > 0
}

// api returns the API t belongs to, its first segment; "" for none.
func (t *target) api() string {
	if len(t.segs) == 0 {
		return ""
	}
	return t.segs[0]
}

// keys returns the keys of the nodes of t's budget tree, widest first:
// the host (""), then each prefix of its segments, the last its whole path.
func (t *target) keys() []string {
	keys := make([]string, len(t.segs)+1)
	for n := 1; n <= len(t.segs); n++ {
		keys[n] = keys[n-1] + "/" + t.segs[n-1]
		if n == 1 {
			keys[n] = t.segs[0]
		}
	}
	return keys
}
