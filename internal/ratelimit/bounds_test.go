package ratelimit

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestFieldBounds checks that a field past maxFieldBytes, or listing more
// than maxPolicies policies, is ignored whole, while one just within the
// bounds still reads.
func TestFieldBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	// policies returns n structured policies, the first one spent.
	policies := func(n int) (policy, state string) {
		var p, s []string
		for i := range n {
			r := 1000
			if i == 0 {
				r = 0
			}
			p = append(p, fmt.Sprintf(`"p%d";q=1000;w=60`, i))
			s = append(s, fmt.Sprintf(`"p%d";r=%d;t=5`, i, r))
		}
		return strings.Join(p, ", "), strings.Join(s, ", ")
	}
	pairs := func(n int) string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("Microsoft.Compute/p%d;%d", i, min(i, 1)))
		}
		return strings.Join(out, ",")
	}
	within, withinState := policies(maxPolicies)
	many, manyState := policies(2000)
	longState := `"p0";r=0;t=5;x="` + strings.Repeat("a", maxFieldBytes) + `"`
	for _, tt := range []struct {
		name   string
		header http.Header
		want   bool
	}{
		{"structured, at the bounds", http.Header{"Ratelimit-Policy": {within}, "Ratelimit": {withinState}}, true},
		{"structured, too many policies", http.Header{"Ratelimit-Policy": {many}, "Ratelimit": {manyState}}, false},
		{"structured, too long", http.Header{"Ratelimit": {longState}}, false},
		{"structured, too long over several lines", http.Header{"Ratelimit": {withinState, `"y";r=5;z="` + strings.Repeat("a", maxFieldBytes-len(withinState)) + `"`}}, false},
		{"ARM resource, at the bound", http.Header{"X-Ms-Ratelimit-Remaining-Resource": {pairs(maxPolicies)}}, true},
		{"ARM resource, too many", http.Header{"X-Ms-Ratelimit-Remaining-Resource": {pairs(2000)}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := Parse(tt.header, now)
			assert.Equal(t, tt.want, ok, "%+v", b)
		})
	}
	// draft-03's limit field: past the bound, its policies are ignored
	// (the limit with them); the remaining count still reads.
	h := http.Header{"Ratelimit-Limit": {"100" + strings.Repeat(", 100;w=60", 2000)}, "Ratelimit-Remaining": {"5"}}
	b, ok := Parse(h, now)
	assert.True(t, ok)
	assert.Zero(t, b.Limit)
	assert.Zero(t, b.Window)
}
