package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverBinary is the server the tests start: redis-server (Debian's
// package; make test installs it), or another compatible one such as
// valkey-server named by REDIS_SERVER.
func serverBinary() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	return "redis-server"
}

// readyWithin bounds a server's start: redis-server is up in milliseconds.
const readyWithin = 10 * time.Second

// server is a redis-server the tests run on a loopback port, in a
// directory of its own, saving nothing, so that a restart starts empty.
type server struct {
	port    int
	dir     string
	cmd     *exec.Cmd
	cluster bool // a one-node Redis Cluster holding every slot
}

// startServer starts a server on a free loopback port.
func startServer(dir string) (*server, error) {
	return startServerMode(dir, false)
}

func startServerMode(dir string, cluster bool) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("free port %d: %w", port, err)
	}
	s := &server{port: port, dir: dir, cluster: cluster}
	return s, s.start()
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start() error {
	bin, err := exec.LookPath(serverBinary())
	if err != nil {
		return fmt.Errorf("%s not found (make test installs redis-server): %w", serverBinary(), err)
	}
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--loglevel", "warning"}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+strconv.Itoa(s.port)+".conf")
	}
	cmd := exec.Command(bin, args...)
	// The server dies with the test binary, even when it crashes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s on port %d: %w", bin, s.port, err)
	}
	s.cmd = cmd
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(readyWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s.ready(rdb)
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("%s on port %d not ready within %v: %w", bin, s.port, readyWithin, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a starting process: no event to wait on
	}
}

// ready gives a cluster node every slot and waits for the cluster to
// report itself ok.
func (s *server) ready(rdb *redis.Client) error {
	if !s.cluster {
		return nil
	}
	ctx := context.Background()
	if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		return fmt.Errorf("cluster node on port %d: add slots: %w", s.port, err)
	}
	deadline := time.Now().Add(readyWithin)
	for {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster node on port %d not ok within %v: %v %q", s.port, readyWithin, err, info)
		}
		time.Sleep(10 * time.Millisecond) // the node settles its state on its own
	}
}

// kill ends the server at once, as a crash would, and reaps it.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server must be able to die
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// restart kills the server and starts an empty one on the same port.
func (s *server) restart() error {
	s.kill()
	return s.start()
}

// pause stops the server's process (SIGSTOP): connections stay open and
// nothing answers, as with a hung or partitioned Redis.
func (s *server) pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

func (s *server) resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// newServer starts a server of the test's own, stopped at its end.
func newServer(t testing.TB) *server {
	t.Helper()
	s, err := startServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// runs tells apart the runs of one test (-count) on the shared server;
// prefixes holds each running test's prefix.
var (
	runs     atomic.Int64
	prefixes sync.Map // testing.TB -> string
)

// testPrefix is a prefix of t's own: tests that share one server share no
// keys, and the stores of one test share them, as a fleet does.
func testPrefix(t testing.TB) string {
	p, loaded := prefixes.LoadOrStore(t, fmt.Sprintf("%s-%d", t.Name(), runs.Add(1)))
	if !loaded {
		t.Cleanup(func() { prefixes.Delete(t) })
	}
	return p.(string)
}

// shared is the server of the tests that do not break it, one per package.
var shared *server

// newClient returns a client of srv closed at the test's end. Its
// ContextTimeoutEnabled is left unset, as redis.NewClient's users leave it.
func newClient(t testing.TB, srv *server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// testTimeout replaces DefaultTimeout in the tests that do not test it:
// on a shared machine under -race a healthy call may take longer than 50 ms.
const testTimeout = 5 * time.Second

// newStore returns a store on a fresh client of srv, with a prefix of the
// test's own so that tests on the shared server do not see each other.
func newStore(t testing.TB, srv *server, opts ...Option) *Store {
	t.Helper()
	return newStoreOn(t, newClient(t, srv), opts...)
}

func newStoreOn(t testing.TB, rdb redis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	s, err := New(rdb, append([]Option{WithPrefix(testPrefix(t)), WithTimeout(testTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			t.Error(err)
		}
	})
	return s
}
