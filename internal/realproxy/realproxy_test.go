package realproxy

import (
	"errors"
	"io"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// requireInstalled skips the test when nginx or haproxy is missing, except
// in CI, where `make test` installs both first and a missing one is a
// failure.
func requireInstalled(t *testing.T) {
	t.Helper()
	err := Installed()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %v; `make install-deps` installs nginx-light and haproxy", err)
	}
	t.Skipf("%v; `make install-deps` installs nginx-light and haproxy (with CI=true this fails)", err)
}

// start starts a proxy and stops it when the test ends, checking that no
// process of it is left.
func startProxy(t *testing.T, run func() (*Proxy, error)) *Proxy {
	t.Helper()
	p, err := run()
	require.NoError(t, err)
	t.Cleanup(func() {
		pid := p.cmd.Process.Pid
		require.NoError(t, p.Close())
		assert.ErrorIs(t, syscall.Kill(-pid, 0), syscall.ESRCH, "a process of the proxy's group is left")
		_, err := os.Stat(p.dir)
		assert.True(t, errors.Is(err, os.ErrNotExist), "%s is left: %v", p.dir, err)
	})
	return p
}

func get(t *testing.T, hc *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := hc.Get(url)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

// Each refusal the benchmark relies on, answered by the real limiter: its
// status and Retry-After, after the limit is spent.
func TestRefusals(t *testing.T) {
	requireInstalled(t)
	origin := throttletest.NewServer(throttletest.Config{})
	defer origin.Close()
	zone := []Zone{{Location: "/", Rate: 1, Burst: 2}}
	tests := []struct {
		name       string
		run        func() (*Proxy, error)
		admitted   int
		wantStatus int
		wantRA     string
	}{
		{"nginx, 429 with Retry-After", func() (*Proxy, error) {
			return StartNginx(Nginx{Origin: origin.URL, Zones: zone, Status: 429, RetryAfter: "1"})
		}, 3, 429, "1"},
		{"nginx, bare 429", func() (*Proxy, error) { return StartNginx(Nginx{Origin: origin.URL, Zones: zone, Status: 429}) }, 3, 429, ""},
		{"nginx's default 503", func() (*Proxy, error) { return StartNginx(Nginx{Origin: origin.URL, Zones: zone}) }, 3, 503, ""},
		{"HAProxy, 429 with Retry-After", func() (*Proxy, error) {
			return StartHAProxy(HAProxy{Origin: origin.URL, Limit: 3, RetryAfter: "1"})
		}, 3, 429, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startProxy(t, tt.run)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			for i := range tt.admitted {
				resp := get(t, hc, p.URL+"/v1.0/users/1")
				require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
				assert.Empty(t, resp.Header.Get("Retry-After"), "an admitted answer carries no Retry-After")
			}
			resp := get(t, hc, p.URL+"/v1.0/users/1")
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			assert.Equal(t, tt.wantRA, resp.Header.Get("Retry-After"))
		})
	}
}

// A zone covers its location only; other paths pass unlimited.
func TestNginxZonesByLocation(t *testing.T) {
	requireInstalled(t)
	origin := throttletest.NewServer(throttletest.Config{})
	defer origin.Close()
	p := startProxy(t, func() (*Proxy, error) {
		return StartNginx(Nginx{Origin: origin.URL, Status: 429, Zones: []Zone{{Location: "/v1.0/sites", Rate: 1, Burst: 0}}})
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	assert.Equal(t, http.StatusOK, get(t, hc, p.URL+"/v1.0/sites/1").StatusCode)
	assert.Equal(t, http.StatusTooManyRequests, get(t, hc, p.URL+"/v1.0/sites/2").StatusCode)
	for range 5 {
		assert.Equal(t, http.StatusOK, get(t, hc, p.URL+"/v1.0/users/1").StatusCode)
	}
}

func TestValidate(t *testing.T) {
	const origin = "http://127.0.0.1:1"
	zone := []Zone{{Location: "/", Rate: 1}}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nginx origin", Nginx{Origin: "127.0.0.1:1", Zones: zone}.validate(), `Nginx.Origin = "127.0.0.1:1"`},
		{"nginx without zones", Nginx{Origin: origin}.validate(), "Nginx.Zones is empty"},
		{"nginx location", Nginx{Origin: origin, Zones: []Zone{{Location: "/a;b", Rate: 1}}}.validate(), `Location = "/a;b"`},
		{"nginx twice", Nginx{Origin: origin, Zones: []Zone{{Location: "/", Rate: 1}, {Location: "/", Rate: 2}}}.validate(), "appears twice"},
		{"nginx rate", Nginx{Origin: origin, Zones: []Zone{{Location: "/", Rate: 0}}}.validate(), "Rate = 0"},
		{"nginx burst", Nginx{Origin: origin, Zones: []Zone{{Location: "/", Rate: 1, Burst: -1}}}.validate(), "Burst = -1"},
		{"nginx status", Nginx{Origin: origin, Zones: zone, Status: 200}.validate(), "Status = 200"},
		{"nginx retry-after", Nginx{Origin: origin, Zones: zone, RetryAfter: "1; x"}.validate(), `RetryAfter = "1; x"`},
		{"haproxy limit", HAProxy{Origin: origin}.validate(), "Limit = 0"},
		{"haproxy period", HAProxy{Origin: origin, Limit: 1, Period: time.Microsecond}.validate(), "Period = 1µs"},
		{"haproxy status", HAProxy{Origin: origin, Limit: 1, Status: 302}.validate(), "Status = 302"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorContains(t, tt.err, tt.want)
		})
	}
	assert.NoError(t, Nginx{Origin: origin, Zones: zone, Status: 429, RetryAfter: "1"}.validate())
	assert.NoError(t, HAProxy{Origin: origin, Limit: 1}.validate())
}

func TestFloors(t *testing.T) {
	assert.Equal(t, 4897500*time.Microsecond, LimitReqFloor(2000, 400, 40))
	assert.Zero(t, LimitReqFloor(10, 400, 40))
	assert.Equal(t, 5*time.Second, StickTableFloor(2000, 400, time.Second))
	assert.Zero(t, StickTableFloor(400, 400, time.Second))
}
