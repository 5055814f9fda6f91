package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWorkloadPaths(t *testing.T) {
	tests := []struct {
		workload string
		i        int
		wantKey  string
		wantPath string
	}{
		{"user/1", 7, "user/1", "/v1.0/users/0"},
		{"user/50", 57, "user/50", "/v1.0/users/7"},
		{"user/n", 1999, "user/n", "/v1.0/users/1999"},
		{"mailbox/50", 123, "mailbox/50", "/v1.0/users/u23/messages"},
		{"collection", 5, "collection", "/v1.0/users"},
		{"collection/50", 5, "collection", "/v1.0/users"},
		{"drive/n", 42, "drive/n", "/v1.0/drives/d1/items/42"},
	}
	for _, tt := range tests {
		t.Run(tt.workload, func(t *testing.T) {
			w, err := parseWorkload(tt.workload)
			require.NoError(t, err)
			assert.Equal(t, tt.wantKey, w.key())
			assert.Equal(t, tt.wantPath, w.path(tt.i, 2000))
		})
	}
	for _, bad := range []string{"user/0", "user/x", "user", "inbox/n"} {
		_, err := parseWorkload(bad)
		assert.Error(t, err, bad)
	}
}

func TestWorkloadsMatrix(t *testing.T) {
	var sps []spread
	for _, v := range []string{"1", "50", "n"} {
		sp, err := parseSpread(v)
		require.NoError(t, err)
		sps = append(sps, sp)
	}
	var got []string
	for _, w := range workloads(shapes, sps) {
		got = append(got, w.key())
	}
	assert.Equal(t, []string{"user/1", "user/50", "user/n", "mailbox/1", "mailbox/50", "mailbox/n", "collection", "drive/1", "drive/50", "drive/n"}, got)
	w, err := parseWorkload("mailbox/50")
	require.NoError(t, err)
	assert.Equal(t, "`/v1.0/users/u{id}/messages` over 50 ids", w.about(2000))
	assert.Equal(t, "`/v1.0/users/{id}` over 2000 ids (one per request)", workloads(shapes[:1], sps[2:])[0].about(2000))
}

func TestRunsWorkload(t *testing.T) {
	user, _ := parseWorkload("user/n")
	mailbox, _ := parseWorkload("mailbox/50")
	full := []client{clients[5]} // ours
	assert.True(t, runsWorkload(clients[5], full, mailbox, user))
	assert.False(t, runsWorkload(clients[3], full, mailbox, user))
	assert.True(t, runsWorkload(clients[3], full, user, user))
}
