package redisstore

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadOptions(t *testing.T) {
	rdb := newClient(t, shared)
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"empty prefix", WithPrefix(""), `prefix ""`},
		{"prefix with a brace", WithPrefix("a{b"), `prefix "a{b"`},
		{"long prefix", WithPrefix(strings.Repeat("p", maxPrefix+1)), "want 1 to 64 bytes"},
		{"zero timeout", WithTimeout(0), "timeout 0s"},
		{"negative probe interval", WithProbeInterval(-time.Second), "probe interval -1s"},
		{"zero active duration", WithActiveFor(0), "active duration 0s"},
		{"zero pace duration", WithPaceFor(0), "pace duration 0s"},
		{"short slot lease", WithSlotLease(10 * time.Millisecond), "slot lease 10ms"},
		{"nil logger", WithLogger(nil), "nil logger"},
		{"nil clock", WithClock(nil), "nil clock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(rdb, tt.opt)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := New(nil)
	require.ErrorContains(t, err, "nil redis client")
}

func TestNewDefaults(t *testing.T) {
	s, err := New(newClient(t, shared), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	assert.Equal(t, DefaultTimeout, s.cfg.timeout)
	assert.Equal(t, DefaultProbeInterval, s.cfg.probeInterval)
	assert.Equal(t, DefaultActiveFor, s.cfg.activeFor)
	assert.Equal(t, DefaultPaceFor, s.cfg.paceFor)
	assert.Equal(t, DefaultSlotLease, s.cfg.slotLease)
	assert.Equal(t, "{"+DefaultPrefix+"}:hosts", s.keys.hosts)
	assert.False(t, s.direct, "redis.NewClient leaves ContextTimeoutEnabled unset")
	require.NoError(t, s.Close(), "Close twice is harmless")
}

func TestDirectWhenTheClientHonoursContexts(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		want bool
	}{
		{"client", redis.NewClient(&redis.Options{Addr: shared.addr(), ContextTimeoutEnabled: true}), true},
		{"cluster client", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{shared.addr()}, ContextTimeoutEnabled: true}), true},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": shared.addr()}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { _ = tc.rdb.Close() })
			assert.Equal(t, tc.want, honoursContext(tc.rdb))
		})
	}
}

// A call after Close fails open without starting anything Close would have
// to wait for, and without calling Redis unavailable.
func TestCallAfterClose(t *testing.T) {
	log := &logBuffer{}
	s, err := New(newClient(t, shared), WithPrefix(testPrefix(t)), WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.MarkActive(context.Background(), "h"), ErrUnavailable)
	assert.Zero(t, log.count("level=WARN"))
}
