package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// group is the results of every client for one scenario and method.
type group struct {
	scenario scenario
	workload workload // zero for a scenario without workloads
	method   string
	results  []result
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// writeTable writes one group as a markdown table, followed by the first
// error of every client that had errors.
func writeTable(w io.Writer, g group, p params) {
	p = g.scenario.sized(p)
	limit := g.scenario.limit(p)
	if g.scenario.workloads {
		fmt.Fprintf(w, "### (%s) %s, %s %s\n\n", g.scenario.key, g.scenario.title, g.method, g.workload.about(p.n))
	} else {
		fmt.Fprintf(w, "### %s, %s\n\n", g.scenario.title, g.method)
	}
	fmt.Fprintf(w, "n=%d, c=%d, physical limit %s", p.n, p.c, secs(limit))
	switch {
	case g.scenario.limitAbout != nil:
		fmt.Fprint(w, g.scenario.limitAbout(p))
	case g.scenario.key == "d", g.scenario.key == "e":
		fmt.Fprintf(w, " (the slowest budget's; each budget's own is below)")
	case g.scenario.key == "b":
		fmt.Fprintf(w, " (the outage)")
	case g.scenario.batch:
		fmt.Fprintf(w, " (%d items in batches of %d, at %g/s over %d mailboxes)", p.n, batchSize, p.rate, mailboxes)
	case g.scenario.key == "haproxy":
		fmt.Fprintf(w, " (%d requests at %g/s)", p.n, p.rate)
	default:
		fmt.Fprintf(w, " (%d throttled requests at %g/s, burst %d)", throttledCount(g.scenario, p), p.rate, p.burst)
	}
	fmt.Fprint(w, "\n\n")
	head := "| client | ok | failed | errors | attempts/req | 429s/req | wall | wall/limit | p50 | p99 | bodies leaked | goroutines left | bad bodies | sent early |"
	rule := "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
	if g.scenario.split {
		head += " open API: held | open API: max hold | open API: p99 | open API: 429s |"
		rule += "--:|--:|--:|--:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range g.results {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.2f | %.2f | %s | %.2fx | %s | %s | %d | %d | %d | %d |",
			r.client.name, r.succeeded, r.failed, r.errored, r.attemptsPerRequest(), r.throttledPerRequest(),
			secs(r.wall), r.overLimit(), secs(r.p50), secs(r.p99), r.leaked, r.goroutines, r.badBody, r.early)
		if g.scenario.split {
			fmt.Fprintf(w, " %d of %d | %s | %s | %d |", r.open.held, r.open.n, secs(r.open.maxHold), secs(r.open.p99), r.open.throttled)
		}
		fmt.Fprintln(w)
	}
	writeAPIs(w, g)
	var notes []string
	for _, r := range g.results {
		if r.firstErr != "" {
			notes = append(notes, fmt.Sprintf("- %s, first of %d errors: `%s`", r.client.name, r.errored, oneLine(r.firstErr)))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
	}
	fmt.Fprintln(w)
}

// writeAPIs writes, for a scenario with several budgets, each budget's
// time over its own physical limit, with its attempts per request and its
// lost requests in brackets.
func writeAPIs(w io.Writer, g group) {
	if g.scenario.apis == nil || len(g.results) == 0 || len(g.results[0].apis) == 0 {
		return
	}
	fmt.Fprint(w, "\nEach budget against its own physical limit: wall/limit (attempts/request, lost).\n\n")
	head, rule := "| client |", "|---|"
	for _, a := range g.results[0].apis {
		head += fmt.Sprintf(" %s (%s) |", a.name, secs(a.limit))
		rule += "--:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range g.results {
		fmt.Fprintf(w, "| %s |", r.client.name)
		for _, a := range r.apis {
			fmt.Fprintf(w, " %.2fx (%.2f, %d) |", a.overLimit(), float64(a.attempts)/float64(max(a.n, 1)), a.lost)
		}
		fmt.Fprintln(w)
	}
}

// writeSummary writes, for scenario (a), the two figures the throttle
// queue is judged by, side by side for every client and method.
func writeSummary(w io.Writer, groups []group) {
	var as []group
	for _, g := range groups {
		if g.scenario.key == "a" {
			as = append(as, g)
		}
	}
	if len(as) == 0 {
		return
	}
	fmt.Fprintf(w, "Scenario (a) at a glance (lost = failed + errors):\n\n| client |")
	for _, g := range as {
		fmt.Fprintf(w, " %s attempts/req | %s wall/limit | %s lost |", g.method, g.method, g.method)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("--:|--:|--:|", len(as)))
	for i, r := range as[0].results {
		fmt.Fprintf(w, "| %s |", r.client.name)
		for _, g := range as {
			r := g.results[i]
			fmt.Fprintf(w, " %.2f | %.2fx | %d |", r.attemptsPerRequest(), r.overLimit(), r.failed+r.errored)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func throttledCount(sc scenario, p params) int {
	if sc.split {
		return (p.n + 1) / 2
	}
	return p.n
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "`", "'")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// writeResults writes RESULTS.md: how the run was made, what each column
// means, and the tables.
func writeResults(path, chart, command, load string, p params, groups []group) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	w := f
	fmt.Fprintf(w, "# Throttle benchmark\n\n")
	fmt.Fprintf(w, "Every client below sends the same workload to an embedded loopback server from "+
		"[`throttletest`](../throttletest) that throttles like Microsoft Graph. Reproduce with `make bench` "+
		"(or `cd bench && go run . -out .`); this run: `%s`, %s, %s/%s, %d CPUs, %s",
		command, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	if load != "" {
		fmt.Fprintf(w, ", %s", load)
	}
	fmt.Fprint(w, ".\n\n")
	fmt.Fprintf(w, "Workload: n=%d requests from c=%d concurrent workers, each request once through the client's `Do` "+
		"with a %s context cap (the whole run is capped at %s); the workload reads and closes every body it gets. "+
		"GET reads one item; POST sends a small JSON body from a `bytes.Reader`, as a plain `http.Client` user does. "+
		"Clients run one after another, each with a fresh server, client and connection pool.\n\n", p.n, p.c, p.reqTimeout, p.runTimeout)
	fmt.Fprintf(w, "## Clients\n\n")
	for _, c := range clients {
		fmt.Fprintf(w, "- **%s**: %s.\n", c.name, c.setup)
	}
	fmt.Fprintf(w, "\n## Scenarios\n\n")
	for _, s := range scenarios {
		if !s.workloads { // those with workloads are in RESULTS-real.md
			fmt.Fprintf(w, "- **%s**: %s\n", s.title, s.about)
		}
	}
	fmt.Fprintf(w, "\n## Columns\n\n%s\n", columns(p))
	fmt.Fprintf(w, "## Results\n\n")
	writeSummary(w, groups)
	fmt.Fprintf(w, "![completed requests over time](%s)\n\n", chart)
	for _, g := range groups {
		writeTable(w, g, p)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}

func columns(p params) string {
	return fmt.Sprintf(`- **ok / failed / errors**: requests that ended with a 2xx; with another status (the client gave up and returned it); with an error from `+"`Do`"+`.
- **attempts/req, 429s/req**: attempts the server received and 429s it sent, divided by n (the minimum is 1 and 0).
- **wall, wall/limit**: time from the first request issued to the last one finished, and its ratio to the physical limit printed above each table.
- **p50, p99**: latency of one request as the application sees it, from `+"`Do`"+` to its body closed, failures included.
- **bodies leaked**: response bodies that came out of the base transport and were never closed (counted by a wrapper around it).
- **goroutines left**: `+"`runtime.NumGoroutine`"+` after the run minus before it, once idle connections are closed and the count settles. The workload cancels each request's context when it is done, which also closes a connection held by a leaked body, so leaks show in the previous column rather than here.
- **bad bodies**: requests of which an attempt reached the server with a body whose SHA-256 differs from the one the workload declared in `+"`X-Body-Sha256`"+`.
- **sent early**: attempts that reached the server before the time named by the `+"`Retry-After`"+` of the previous answer to the same request (tolerance %s for clock granularity).
- **open API** (scenarios c): the requests to the API that is not throttled. **held**: how many of them left the client (reached the base transport, below all retry logic) more than %s after the application called `+"`Do`"+`; the code in between takes microseconds, so only a client that holds requests back (or a badly overloaded machine) gets there. It is measured in the client rather than at the server because the server's view adds dialling, accepting and scheduling, which on a loaded machine delayed even the no-retry client's requests by over a second; **max hold**: the longest such delay, or the whole latency of a request that never left the client; **429s**: throttled answers they got (never any: that API is not throttled).
`, throttletest.EarlyTolerance, p.heldAfter)
}

// writeChart draws completed requests over time, one panel per scenario
// and method, one line per client.
func writeChart(path string, p params, groups []group, methods []string) error {
	cols := len(methods)
	rows := (len(groups) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*plot.Plot, cols)
	}
	for gi, g := range groups {
		pl := plot.New()
		pl.Title.Text = fmt.Sprintf("%s, %s", g.scenario.title, g.method)
		pl.X.Label.Text = "seconds"
		pl.Y.Label.Text = "requests succeeded"
		pl.Legend.Top = false
		pl.Legend.Left = false
		pl.Add(plotter.NewGrid())
		if ideal := idealLine(g.scenario, p); ideal != nil {
			l, err := plotter.NewLine(ideal)
			if err != nil {
				return fmt.Errorf("drawing the limit of %s: %w", g.scenario.key, err)
			}
			l.Color = color.Gray{Y: 120}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			pl.Add(l)
			pl.Legend.Add("physical limit", l)
		}
		for _, r := range g.results {
			pts := make(plotter.XYs, 0, len(r.completions)+1)
			pts = append(pts, plotter.XY{})
			for k, d := range r.completions {
				pts = append(pts, plotter.XY{X: d.Seconds(), Y: float64(k + 1)})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("drawing %s in %s: %w", r.client.key, g.scenario.key, err)
			}
			l.Color = clientColor(r.client.key)
			l.Width = vg.Points(1.5)
			if r.client.key == "ours" {
				l.Width = vg.Points(2.5)
			}
			pl.Add(l)
			pl.Legend.Add(r.client.name, l)
		}
		pl.Y.Min, pl.Y.Max = 0, float64(p.n)*1.05
		plots[gi/cols][gi%cols] = pl
	}
	img := vgimg.New(vg.Length(cols)*6*vg.Inch, vg.Length(rows)*4*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, dc)
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing chart %s: %w", path, err)
	}
	return nil
}

// clientColor keeps each client's colour the same in every panel.
func clientColor(key string) color.Color {
	switch key {
	case "none":
		return color.Black
	case "kiota":
		return plotutil.DarkColors[1] // green
	case "retryablehttp":
		return plotutil.DarkColors[2] // blue
	case "failsafe":
		return plotutil.DarkColors[3] // orange
	case "ours-noqueue":
		return plotutil.DarkColors[4] // purple
	default:
		return plotutil.DarkColors[0] // red
	}
}

// idealLine is the most requests any client can have completed by each
// moment: the bucket's burst at once, then its rate; or nothing until the
// outage ends. nil when the scenario has no single line.
func idealLine(sc scenario, p params) plotter.XYs {
	n := float64(p.n)
	switch sc.key {
	case "a":
		b := min(float64(p.burst), n)
		return plotter.XYs{{X: 0, Y: b}, {X: (n - b) / p.rate, Y: n}}
	case "b":
		o := p.outage.Seconds()
		return plotter.XYs{{X: 0, Y: 0}, {X: o, Y: 0}, {X: o, Y: n}}
	}
	return nil
}

// writeRealResults writes RESULTS-real.md: the scenarios with workloads,
// one line per scenario, workload, method and client.
func writeRealResults(path, command, load string, p params, groups []group) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing real-limiter results: %w", err)
	}
	w := f
	fmt.Fprintf(w, "# Throttle benchmark behind real limiters, with ids spread\n\n")
	fmt.Fprintf(w, "Reproduce with `make bench` (or `cd bench && go run . -out .`); this run: `%s`, %s, %s/%s, %d CPUs, %s",
		command, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	if load != "" {
		fmt.Fprintf(w, ", %s", load)
	}
	fmt.Fprintf(w, ".\n\nWorkload: n=%d requests from c=%d workers (nginx-zones: three quarters of both), as in [RESULTS.md](RESULTS.md); "+
		"request i goes to id i mod (the spread). Attempts, refusals and early retries behind nginx and HAProxy are counted "+
		"in the client's transport below every client's retry logic, since the server sees only what the limiter let through.\n\n", p.n, p.c)
	fmt.Fprintf(w, "## Scenarios\n\n")
	seen := map[string]bool{}
	for _, g := range groups {
		if !seen[g.scenario.key] {
			seen[g.scenario.key] = true
			fmt.Fprintf(w, "- **%s** (%s): %s\n", g.scenario.key, g.scenario.title, g.scenario.about)
		}
	}
	fmt.Fprintf(w, "\n## Workloads\n\n")
	for _, sh := range shapes {
		fmt.Fprintf(w, "- **%s**: GET and POST to %s.\n", sh.key, sh.about)
	}
	fmt.Fprintf(w, "\nSpread `1`: every request to id 0; `50`: ids 0-49; `n`: one id per request.\n\n")
	fmt.Fprintf(w, "## Results\n\nwall/limit: wall time over the scenario's physical limit; refusals: 429s (503s for nginx-503) per request; "+
		"lost = failed + errors; early: attempts sent before the `Retry-After` of the previous answer.\n\n")
	writeRealSummary(w, groups)
	var zoned []group
	for _, g := range groups {
		if g.scenario.apis != nil {
			zoned = append(zoned, g)
		}
	}
	if len(zoned) > 0 {
		fmt.Fprintf(w, "\n### Each zone against its own physical limit: wall/limit (attempts/request, lost)\n\n")
		for _, g := range zoned {
			fmt.Fprintf(w, "%s %s %s:\n", g.scenario.key, g.method, g.workload.key())
			writeAPIs(w, g)
			fmt.Fprintln(w)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing real-limiter results: %w", err)
	}
	return nil
}

// writeRealSummary writes one line per result of groups.
func writeRealSummary(w io.Writer, groups []group) {
	fmt.Fprintln(w, "| scenario | workload | method | client | wall/limit | attempts/req | refusals/req | failed | errors | bodies leaked | sent early | wall | limit |")
	fmt.Fprintln(w, "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, g := range groups {
		for _, r := range g.results {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.2fx | %.2f | %.2f | %d | %d | %d | %d | %s | %s |\n",
				g.scenario.key, g.workload.key(), g.method, r.client.name, r.overLimit(), r.attemptsPerRequest(), r.throttledPerRequest(),
				r.failed, r.errored, r.leaked, r.early, secs(r.wall), secs(r.limit))
		}
	}
}
