package main

import (
	"fmt"
	"strconv"
	"strings"
)

// shape is how a workload names its targets: the path of the request
// whose id is id. GET reads it and POST sends to it, the same path.
type shape struct {
	key   string // flag value
	about string // for tables and RESULTS.md
	path  func(id string) string
	// oneURL reports that the path does not depend on the id, so that
	// the workload is the same whatever the spread.
	oneURL bool
}

var shapes = []shape{
	{key: "user", about: "`/v1.0/users/{id}`", path: func(id string) string { return "/v1.0/users/" + id }},
	{key: "mailbox", about: "`/v1.0/users/u{id}/messages`", path: func(id string) string { return "/v1.0/users/u" + id + "/messages" }},
	{key: "collection", about: "`/v1.0/users`, one collection", path: func(string) string { return "/v1.0/users" }, oneURL: true},
	{key: "drive", about: "`/v1.0/drives/d1/items/{id}`, items of one drive", path: func(id string) string { return "/v1.0/drives/d1/items/" + id }},
}

// spread is how many distinct ids a workload's requests go to: request i
// has id i mod ids(n).
type spread struct {
	key string // flag value: a number, or "n" for one id per request
	ids func(n int) int
}

func (s spread) about(n int) string {
	if s.key == "n" {
		return fmt.Sprintf("%d ids (one per request)", n)
	}
	if s.ids(n) == 1 {
		return "1 id"
	}
	return fmt.Sprintf("%d ids", s.ids(n))
}

// parseSpread reads a spread flag value: "n", or a count of at least 1.
func parseSpread(v string) (spread, error) {
	v = strings.TrimSpace(v)
	if v == "n" {
		return spread{key: "n", ids: func(n int) int { return n }}, nil
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 {
		return spread{}, fmt.Errorf("spread %q must be n or a number of ids of at least 1", v)
	}
	return spread{key: v, ids: func(n int) int { return min(k, n) }}, nil
}

// workload is a shape and a spread: which URL each request goes to.
type workload struct {
	shape  shape
	spread spread
}

// key names the workload in flags and progress lines: "user/50".
func (w workload) key() string {
	if w.shape.oneURL {
		return w.shape.key
	}
	return w.shape.key + "/" + w.spread.key
}

// about describes the workload for a table's heading.
func (w workload) about(n int) string {
	if w.shape.oneURL {
		return w.shape.about
	}
	return w.shape.about + " over " + w.spread.about(n)
}

// id is the id of request i among n.
func (w workload) id(i, n int) string { return strconv.Itoa(i % w.spread.ids(n)) }

// path is the path of request i among n.
func (w workload) path(i, n int) string { return w.shape.path(w.id(i, n)) }

// workloads is every combination of the shapes and spreads given, a shape
// whose path does not depend on the id once.
func workloads(shs []shape, sps []spread) []workload {
	var out []workload
	for _, sh := range shs {
		if sh.oneURL {
			out = append(out, workload{shape: sh, spread: spread{key: "1", ids: func(int) int { return 1 }}})
			continue
		}
		for _, sp := range sps {
			out = append(out, workload{shape: sh, spread: sp})
		}
	}
	return out
}

// parseWorkload reads one workload key, "user/n" or "collection".
func parseWorkload(v string) (workload, error) {
	name, sp, _ := strings.Cut(strings.TrimSpace(v), "/")
	for _, sh := range shapes {
		if sh.key != name {
			continue
		}
		if sh.oneURL {
			return workloads([]shape{sh}, nil)[0], nil
		}
		s, err := parseSpread(sp)
		if err != nil {
			return workload{}, fmt.Errorf("workload %q: %w", v, err)
		}
		return workload{shape: sh, spread: s}, nil
	}
	return workload{}, fmt.Errorf("workload %q: unknown shape (known: %s)", v, keys(shapes, func(s shape) string { return s.key }))
}
