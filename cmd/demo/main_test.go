package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	tests := []struct {
		name  string
		queue bool
	}{
		{"queue on", true},
		{"queue off finishes too", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			cfg := config{n: 40, c: 10, rate: 50, burst: 5, postEvery: 2, queue: tt.queue}
			s, err := run(cfg, &out)
			require.NoError(t, err)
			assert.Zero(t, s.lost(), out.String())
			assert.Equal(t, cfg.n, s.succeeded+s.failed)
			assert.Equal(t, cfg.n, s.server.Requests, "every request reached the server")
			assert.Positive(t, s.server.Throttled, "the burst of 5 throttles 40 requests")
			assert.Zero(t, s.server.Early)
			assert.Contains(t, out.String(), "slowest request")
		})
	}
}

// TestRunOutage: the summary says when the server was seen down and up
// again.
func TestRunOutage(t *testing.T) {
	var out bytes.Buffer
	cfg := config{n: 40, c: 40, rate: 1000, burst: 100, postEvery: 2, queue: true, outage: time.Second}
	s, err := run(cfg, &out)
	require.NoError(t, err)
	assert.Zero(t, s.lost(), out.String())
	assert.Equal(t, cfg.n, s.succeeded, out.String())
	assert.Regexp(t, `server +seen down at 0\.\d\d s, up again at 1\.\d\d s \(\d+ probes\)`, out.String())
}

// The generated-style builders send what a Kiota-generated client sends.
func TestBuildersHitGraphPaths(t *testing.T) {
	var out bytes.Buffer
	s, err := run(config{n: 4, c: 2, rate: 1000, burst: 100, postEvery: 2, queue: true}, &out)
	require.NoError(t, err)
	assert.Equal(t, 4, s.succeeded, out.String())
	paths := map[string]string{}
	for _, r := range s.requests {
		paths[r.ID] = r.Method + " " + r.Path
	}
	assert.Equal(t, map[string]string{
		"req-0": "POST /v1.0/users", "req-1": "GET /v1.0/users/1",
		"req-2": "POST /v1.0/users", "req-3": "GET /v1.0/users/3",
	}, paths)
}
