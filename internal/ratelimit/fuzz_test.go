package ratelimit

import (
	"math"
	"net/http"
	"testing"
)

// FuzzParse feeds every header Parse reads at once and checks what it
// makes of them: no panic, only finite, non-negative figures, no reset
// before the response arrived, a spent budget always nearly spent, and
// Parse's choice one of ParseAll's budgets. The seeds are in
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add("100", "10", "5", `"default";q=100;w=10`, `"default";r=10;t=5`, "0.9", "3", "a;1,b;2")
	f.Fuzz(func(t *testing.T, limit, remaining, reset, policy, state, percentage, armCount, armResource string) {
		h := http.Header{}
		for name, v := range map[string]string{
			"RateLimit-Limit":                             limit,
			"RateLimit-Remaining":                         remaining,
			"RateLimit-Reset":                             reset,
			"RateLimit-Policy":                            policy,
			"RateLimit":                                   state,
			"X-Ms-Throttle-Limit-Percentage":              percentage,
			"X-Ms-Ratelimit-Remaining-Subscription-Reads": armCount,
			"X-Ms-Ratelimit-Remaining-Resource":           armResource,
		} {
			if v != "" {
				h.Set(name, v)
			}
		}
		all := ParseAll(h, now)
		for _, b := range all {
			for name, v := range map[string]float64{"Limit": b.Limit, "Remaining": b.Remaining, "Used": b.Used} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("%s = %v in %+v", name, v, b)
				}
			}
			if b.Window < 0 || !b.Reset.IsZero() && b.Reset.Before(now) {
				t.Fatalf("window or reset out of range in %+v", b)
			}
			if b.Spent() && !b.NearlySpent() {
				t.Fatalf("spent but not nearly spent: %+v", b)
			}
		}
		got, ok := Parse(h, now)
		if ok != (len(all) > 0) {
			t.Fatalf("Parse found %v, ParseAll %d budgets", ok, len(all))
		}
		if !ok {
			return
		}
		for _, b := range all {
			if b == got {
				return
			}
			if b.tighter(got) {
				t.Fatalf("Parse chose %+v over the tighter %+v", got, b)
			}
		}
		t.Fatalf("Parse chose %+v, not one of %+v", got, all)
	})
}
