// Package redisserver runs a redis-server on a free loopback port for the
// fleet bench and the fleet demo, the way redisstore's tests do: in a
// directory of its own, saving nothing, so that a restart starts empty.
package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// readyWithin bounds a server's start: redis-server is up in milliseconds.
const readyWithin = 10 * time.Second

// Binary is the server started: redis-server (Debian's package; `make
// redis-server` installs it), or another compatible one such as
// valkey-server named by REDIS_SERVER.
func Binary() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	return "redis-server"
}

// Installed reports, as an error that says how to get it, whether Binary
// is missing.
func Installed() error {
	if _, err := exec.LookPath(Binary()); err != nil {
		return fmt.Errorf("%s not found (run `make redis-server`, or `apt-get install redis-server`): %w", Binary(), err)
	}
	return nil
}

// Server is a redis-server on a loopback port.
type Server struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

// Start starts a server on a free loopback port, keeping its files in dir.
func Start(dir string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("free port %d: %w", port, err)
	}
	s := &Server{port: port, dir: dir}
	return s, s.start()
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *Server) start() error {
	bin, err := exec.LookPath(Binary())
	if err != nil {
		return Installed()
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--loglevel", "warning")
	// The server dies with the process that started it, even when it crashes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s on port %d: %w", bin, s.port, err)
	}
	s.cmd = cmd
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(readyWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("%s on port %d not ready within %v: %w", bin, s.port, readyWithin, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a starting process: no event to wait on
	}
}

// Kill ends the server at once, as a crash would, and reaps it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts an empty server on the same port, after Kill.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}
