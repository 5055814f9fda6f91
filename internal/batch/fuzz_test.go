package batch

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzCompleter feeds arbitrary request and response bodies through a
// completer: it must reject what it cannot complete with ErrNotBatch and
// never panic, and what it accepts must come out as valid batch JSON that
// resends only items of the request.
func FuzzCompleter(f *testing.F) {
	for _, name := range []string{"partial", "depends", "gateway", "outoforder"} {
		raw, err := os.ReadFile(filepath.Join(fixtures, name+".json"))
		require.NoError(f, err)
		var fx fixture
		require.NoError(f, json.Unmarshal(raw, &fx))
		f.Add([]byte(fx.Request), []byte(fx.Rounds[0].Response))
	}
	f.Add([]byte(`{"requests":[{"id":"1","method":"GET","url":"/me"}]}`), []byte(`{"responses":[{"id":"1","status":429,"headers":{"Retry-After":1}}]}`))
	f.Fuzz(func(t *testing.T, request, response []byte) {
		c, err := NewCompleter(request)
		if err != nil {
			require.ErrorIs(t, err, ErrNotBatch)
			return
		}
		if _, err := c.Absorb(response); err != nil {
			require.ErrorIs(t, err, ErrNotBatch)
		}
		require.True(t, json.Valid(c.Merged()), "merged: %s", c.Merged())
		body, err := c.ResendBody()
		require.NoError(t, err)
		var doc struct {
			Requests []struct {
				ID        string   `json:"id"`
				DependsOn []string `json:"dependsOn"`
			} `json:"requests"`
		}
		require.NoError(t, json.Unmarshal(body, &doc), "resend: %s", body)
		sent := map[string]bool{}
		for _, r := range doc.Requests {
			require.NotNil(t, c.byID[r.ID], "resent item %q is not in the request", r.ID)
			sent[r.ID] = true
		}
		for _, r := range doc.Requests {
			for _, d := range r.DependsOn {
				require.True(t, sent[d], "item %q depends on %q, which is not resent with it", r.ID, d)
			}
		}
	})
}
