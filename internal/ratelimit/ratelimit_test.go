package ratelimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2026, time.March, 4, 5, 6, 7, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		h      http.Header
		want   Budget
		none   bool
		spent  bool
		nearly bool
	}{
		{name: "no headers", h: header(), none: true},
		{name: "unrelated headers", h: header("Retry-After", "3", "Content-Type", "application/json"), none: true},

		// Draft-03, as SharePoint sends it once 80 % of the minute is used.
		{
			name:   "draft-03 nearly spent",
			h:      header("RateLimit-Limit", "1200", "RateLimit-Remaining", "100", "RateLimit-Reset", "35"),
			want:   Budget{Limit: 1200, Remaining: 100, HasRemaining: true, Used: 1100.0 / 1200, Reset: now.Add(35 * time.Second)},
			nearly: true,
		},
		{
			name: "draft-03 with room",
			h:    header("RateLimit-Limit", "100", "RateLimit-Remaining", "50", "RateLimit-Reset", "10"),
			want: Budget{Limit: 100, Remaining: 50, HasRemaining: true, Used: 0.5, Reset: now.Add(10 * time.Second)},
		},
		{
			name:  "draft-03 spent",
			h:     header("RateLimit-Limit", "100", "RateLimit-Remaining", "0", "RateLimit-Reset", "7"),
			want:  Budget{Limit: 100, HasRemaining: true, Used: 1, Reset: now.Add(7 * time.Second)},
			spent: true, nearly: true,
		},
		{
			name: "draft-03 quota policy names the window",
			h:    header("RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "9"),
			want: Budget{Limit: 10, Remaining: 9, HasRemaining: true, Used: 0.1, Window: time.Second},
		},
		{
			name: "draft-03 limit with its window alone",
			h:    header("RateLimit-Limit", "100;w=60", "RateLimit-Remaining", "100"),
			want: Budget{Limit: 100, Remaining: 100, HasRemaining: true, Window: time.Minute},
		},
		{
			name: "draft-03 remaining alone",
			h:    header("RateLimit-Remaining", "3"),
			want: Budget{Remaining: 3, HasRemaining: true},
		},
		{
			name: "draft-03 fractional reset",
			h:    header("RateLimit-Limit", "10", "RateLimit-Remaining", "10", "RateLimit-Reset", "0.5"),
			want: Budget{Limit: 10, Remaining: 10, HasRemaining: true, Reset: now.Add(500 * time.Millisecond)},
		},
		{
			name: "draft-03 malformed remaining and reset are ignored",
			h:    header("RateLimit-Limit", "100", "RateLimit-Remaining", "-5", "RateLimit-Reset", "soon"),
			want: Budget{Limit: 100},
		},
		{name: "draft-03 all malformed", h: header("RateLimit-Limit", "1e3", "RateLimit-Remaining", "NaN", "RateLimit-Reset", "Inf"), none: true},
		{name: "draft-03 hexadecimal", h: header("RateLimit-Remaining", "0x10"), none: true},
		{name: "draft-03 huge", h: header("RateLimit-Remaining", "99999999999999999999"), none: true},
		{
			name: "draft-03 huge reset is capped",
			h:    header("RateLimit-Remaining", "0", "RateLimit-Reset", "999999999"),
			want: Budget{HasRemaining: true, Reset: now.Add(999999999 * time.Second)}, spent: true, nearly: true,
		},

		// The current draft's structured fields.
		{
			name:   "current draft one policy",
			h:      header("RateLimit-Policy", `"default";q=100;w=10`, "RateLimit", `"default";r=15;t=4`),
			want:   Budget{Name: "default", Limit: 100, Remaining: 15, HasRemaining: true, Used: 0.85, Window: 10 * time.Second, Reset: now.Add(4 * time.Second)},
			nearly: true,
		},
		{
			name: "current draft the tightest of several policies",
			h: header("RateLimit-Policy", `"burst";q=100;w=1, "daily";q=1000;w=86400`,
				"RateLimit", `"burst";r=90;t=1, "daily";r=0;t=3600`),
			want:  Budget{Name: "daily", Limit: 1000, HasRemaining: true, Used: 1, Window: 24 * time.Hour, Reset: now.Add(time.Hour)},
			spent: true, nearly: true,
		},
		{
			name: "current draft fields over several lines",
			h: header("RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", `"b";q=10;w=1`,
				"RateLimit", `"a";r=9;t=1`, "RateLimit", `"b";r=2;t=1`),
			want:   Budget{Name: "b", Limit: 10, Remaining: 2, HasRemaining: true, Used: 0.8, Window: time.Second, Reset: now.Add(time.Second)},
			nearly: true,
		},
		{
			name: "current draft token names, unknown parameters and other members",
			h: header("RateLimit-Policy", `peruser;q=50;qu="requests";w=60;pk=:cHsx:, (1 2);q=3`,
				"RateLimit", `peruser;r=25;t=30;pk=:cHsx:;x=?1, 42;r=0`),
			want: Budget{Name: "peruser", Limit: 50, Remaining: 25, HasRemaining: true, Used: 0.5, Window: time.Minute, Reset: now.Add(30 * time.Second)},
		},
		{
			name: "current draft decimal values",
			h:    header("RateLimit", `"x";r=1.5;t=0.25`),
			want: Budget{Name: "x", Remaining: 1.5, HasRemaining: true, Reset: now.Add(250 * time.Millisecond)},
		},
		{
			name: "current draft state without its policy",
			h:    header("RateLimit", `"default";r=0;t=2`),
			want: Budget{Name: "default", HasRemaining: true, Reset: now.Add(2 * time.Second)}, spent: true, nearly: true,
		},
		{
			name: "current draft malformed policy is ignored, the state still counts",
			h:    header("RateLimit-Policy", `"default";q=100;w=10,`, "RateLimit", `"default";r=60;t=4`),
			want: Budget{Name: "default", Remaining: 60, HasRemaining: true, Reset: now.Add(4 * time.Second)},
		},
		{name: "current draft policy alone says nothing left", h: header("RateLimit-Policy", `"default";q=100;w=10`), none: true},
		{name: "current draft malformed state", h: header("RateLimit", `"default";r=`), none: true},
		{name: "current draft unterminated string", h: header("RateLimit", `"default;r=1`), none: true},
		{name: "current draft negative remaining", h: header("RateLimit", `"default";r=-1`), none: true},
		{name: "current draft remaining as string", h: header("RateLimit", `"default";r="1"`), none: true},
		{name: "current draft no remaining", h: header("RateLimit", `"default";t=1`), none: true},

		// Graph's Identity percentage.
		{
			name:   "graph percentage nearly spent",
			h:      header("x-ms-throttle-limit-percentage", "0.85", "x-ms-throttle-scope", "Tenant_Application/ReadWrite/abc"),
			want:   Budget{Name: "Tenant_Application/ReadWrite/abc", Used: 0.85},
			nearly: true,
		},
		{
			name:  "graph percentage past the limit",
			h:     header("x-ms-throttle-limit-percentage", "1.8"),
			want:  Budget{Used: 1.8},
			spent: true, nearly: true,
		},
		{name: "graph percentage malformed", h: header("x-ms-throttle-limit-percentage", "85%"), none: true},
		{name: "graph percentage out of range", h: header("x-ms-throttle-limit-percentage", "80"), none: true},

		// ARM.
		{
			name: "arm the tightest counter",
			h: header("x-ms-ratelimit-remaining-subscription-reads", "11999",
				"x-ms-ratelimit-remaining-subscription-writes", "3"),
			want: Budget{Name: "subscription-writes", Remaining: 3, HasRemaining: true},
		},
		{
			name:  "arm resource policies",
			h:     header("x-ms-ratelimit-remaining-resource", "Microsoft.Compute/HighCostGet3Min;107,Microsoft.Compute/HighCostGet30Min;0"),
			want:  Budget{Name: "Microsoft.Compute/HighCostGet30Min", HasRemaining: true},
			spent: true, nearly: true,
		},
		{name: "arm malformed", h: header("x-ms-ratelimit-remaining-subscription-deletes", "many", "x-ms-ratelimit-remaining-resource", "a;b,c"), none: true},

		// Several forms at once: the tightest wins.
		{
			name: "graph percentage over draft-03 with room",
			h: header("RateLimit-Limit", "100", "RateLimit-Remaining", "90",
				"x-ms-throttle-limit-percentage", "0.9"),
			want: Budget{Used: 0.9}, nearly: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse(tt.h, now)
			if tt.none {
				assert.False(t, ok, "found %+v", got)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tt.want.Name, got.Name)
			assert.InDelta(t, tt.want.Limit, got.Limit, 1e-9, "Limit")
			assert.InDelta(t, tt.want.Remaining, got.Remaining, 1e-9, "Remaining")
			assert.Equal(t, tt.want.HasRemaining, got.HasRemaining, "HasRemaining")
			assert.InDelta(t, tt.want.Used, got.Used, 1e-9, "Used")
			assert.Equal(t, tt.want.Window, got.Window, "Window")
			assert.True(t, tt.want.Reset.Equal(got.Reset), "Reset = %v, want %v", got.Reset, tt.want.Reset)
			assert.Equal(t, tt.spent, got.Spent(), "Spent")
			assert.Equal(t, tt.nearly, got.NearlySpent(), "NearlySpent")
		})
	}
}

func TestParseAllKeepsEveryBudget(t *testing.T) {
	h := header(
		"RateLimit-Limit", "100", "RateLimit-Remaining", "90",
		"RateLimit", `"a";r=1, "b";r=2`,
		"x-ms-throttle-limit-percentage", "0.9",
		"x-ms-ratelimit-remaining-subscription-reads", "5",
	)
	var names []string
	for _, b := range ParseAll(h, now) {
		names = append(names, b.Name)
	}
	assert.ElementsMatch(t, []string{"", "a", "b", "", "subscription-reads"}, names)
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in      string
		names   []string
		wantErr bool
	}{
		{in: ``, names: nil},
		{in: `  "a" , b;x=1 ,c `, names: []string{"a", "b", "c"}},
		{in: `"esc\"aped\\"`, names: []string{`esc"aped\`}},
		{in: `a;x;y=?0;z=@1700000000;w=%"caf%c3%a9"`, names: []string{"a"}},
		{in: `(a "b";q=1);p=2, c`, names: []string{"c"}},
		{in: `1, ?1, :AQID:, c`, names: []string{"c"}},
		{in: `a;q=-1.5`, names: []string{"a"}},
		{in: `a,`, wantErr: true},
		{in: `a,,b`, wantErr: true},
		{in: `a b`, wantErr: true},
		{in: `a;Q=1`, wantErr: true},
		{in: `a;q=1.2345`, wantErr: true},
		{in: `a;q=1234567890123456`, wantErr: true},
		{in: `a;q=.5`, wantErr: true},
		{in: `a;q=1.`, wantErr: true},
		{in: `"a` + "\x01" + `"`, wantErr: true},
		{in: `"a\x"`, wantErr: true},
		{in: `(a b`, wantErr: true},
		{in: `:AQ*D:`, wantErr: true},
		{in: `?2`, wantErr: true},
		{in: `%a`, wantErr: true},
		{in: `@`, wantErr: true},
		{in: `a;t=@`, wantErr: true},
		{in: `-`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseList(tt.in)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			var names []string
			for _, m := range got {
				names = append(names, m.name)
			}
			assert.Equal(t, tt.names, names)
		})
	}
}

func TestAnnounced(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want bool
	}{
		{name: "nil", h: nil},
		{name: "unrelated", h: header("Retry-After", "3", "Content-Type", "application/json")},
		{name: "draft-03", h: header("RateLimit-Remaining", "3"), want: true},
		{name: "draft-03 limit only", h: header("RateLimit-Limit", "10"), want: true},
		{name: "current draft", h: header("RateLimit", `"a";r=3`), want: true},
		{name: "graph", h: header("x-ms-throttle-limit-percentage", "0.9"), want: true},
		{name: "arm", h: header("x-ms-ratelimit-remaining-subscription-reads", "11999"), want: true},
		{name: "arm, not canonical", h: http.Header{"x-ms-ratelimit-remaining-resource": {"p;3"}}, want: true},
		{name: "arm lookalike", h: header("x-ms-ratelimit-remainin", "3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Announced(tt.h))
			if _, ok := Parse(tt.h, now); ok {
				assert.True(t, Announced(tt.h), "Parse found a budget Announced missed")
			}
		})
	}
}

// TestAnnouncedCoversParse checks that every header Parse reads a budget
// from is one Announced sees, so that no budget is skipped unread.
func TestAnnouncedCoversParse(t *testing.T) {
	for _, h := range []http.Header{
		header("RateLimit-Limit", "1200", "RateLimit-Remaining", "100", "RateLimit-Reset", "35"),
		header("RateLimit-Policy", `"p";q=10;w=1`, "RateLimit", `"p";r=0;t=1`),
		header("x-ms-throttle-limit-percentage", "1.2", "x-ms-throttle-scope", "Identity"),
		header("x-ms-ratelimit-remaining-tenant-writes", "7"),
	} {
		_, ok := Parse(h, now)
		require.True(t, ok, "%v", h)
		assert.True(t, Announced(h), "%v", h)
	}
	plain := header("Content-Type", "a", "Date", "b")
	assert.Zero(t, testing.AllocsPerRun(100, func() { Announced(plain) }))
}
