// Package realproxy runs real rate limiters, nginx's limit_req and
// HAProxy's stick-table counters from the system's packages, on loopback in
// front of an origin server, for the tests and the benchmark that check the
// throttle queue against servers nobody here wrote.
//
// Each proxy runs as a child process in the foreground, with a
// configuration, pid file and logs of its own in a temporary directory, on a
// free port of 127.0.0.1; Close stops it and removes the directory. Nothing
// is installed or left behind: a missing binary is reported by ErrNotInstalled
// so that a caller can skip.
package realproxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrNotInstalled is returned, wrapped, when the proxy's binary is not
// found; `make install-deps` installs both from Debian's packages.
var ErrNotInstalled = errors.New("not installed")

// startTimeout bounds how long a proxy may take to accept connections: both
// start in milliseconds, so a second is already a sign of a broken config.
const startTimeout = 10 * time.Second

// stopTimeout is how long a proxy gets to exit after SIGTERM (a fast
// shutdown for both) before its process group is killed.
const stopTimeout = 5 * time.Second

// Proxy is one running proxy process. Close it when done.
type Proxy struct {
	// URL is the proxy's base URL, "http://127.0.0.1:port", without a
	// trailing slash.
	URL string

	name   string
	dir    string
	cmd    *exec.Cmd
	output *lockedBuffer // the process's stdout and stderr
	exited chan struct{}
	err    error // the process's exit, once exited is closed

	closeOnce sync.Once
	closeErr  error
}

// lookPath finds a binary on PATH or in the sbin directories where Debian
// puts daemons, which a user's PATH often lacks.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("realproxy: %s: %w", name, ErrNotInstalled)
}

// Installed reports whether both nginx and haproxy can be started.
func Installed() error {
	for _, name := range []string{"nginx", "haproxy"} {
		if _, err := lookPath(name); err != nil {
			return err
		}
	}
	return nil
}

// FreePort returns a port of 127.0.0.1 that nothing listens on now. Another
// process may take it before the proxy binds it; start then fails and says
// so, which on a loopback port chosen by the kernel a moment earlier is rare
// enough for tests.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("realproxy: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// start runs binary with args in dir and waits until port accepts
// connections. On failure it stops the process and removes dir.
func start(name, binary, dir string, port int, args ...string) (*Proxy, error) {
	p := &Proxy{
		URL:    fmt.Sprintf("http://127.0.0.1:%d", port),
		name:   name,
		dir:    dir,
		output: &lockedBuffer{},
		exited: make(chan struct{}),
	}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	// A group of its own, so that nginx's workers can be stopped with
	// their master if it does not stop them itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("realproxy: starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(port); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// waitReady waits until port accepts a connection, the process exits, or
// startTimeout passes.
func (p *Proxy) waitReady(port int) error {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("realproxy: %s exited at start (%v): %s", p.name, p.err, p.Log())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("realproxy: %s does not accept connections on %s after %v: %s", p.name, addr, startTimeout, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns what the proxy wrote to its error log and its output so far.
func (p *Proxy) Log() string {
	var b bytes.Buffer
	if log, err := os.ReadFile(filepath.Join(p.dir, "error.log")); err == nil {
		b.Write(log)
	}
	b.WriteString(p.output.String())
	return b.String()
}

// Close stops the proxy (SIGTERM, then SIGKILL to its process group after
// stopTimeout), waits for it, and removes its directory. It returns an
// error only when the process could not be stopped.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		pid := p.cmd.Process.Pid
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(pid, syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(stopTimeout):
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				<-p.exited
			}
		}
		// nginx's workers leave once their master tells them; a group
		// that outlived its master is killed rather than left behind.
		if err := syscall.Kill(-pid, 0); err == nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		if err := os.RemoveAll(p.dir); err != nil {
			p.closeErr = fmt.Errorf("realproxy: removing %s: %w", p.dir, err)
		}
	})
	return p.closeErr
}

// lockedBuffer collects a process's output, written from exec's copying
// goroutines and read by Log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// prepare finds the named proxy's binary, a free port of 127.0.0.1 for it
// and a new temporary directory to run it in.
func prepare(name string) (binary string, port int, dir string, err error) {
	if binary, err = lookPath(name); err != nil {
		return "", 0, "", err
	}
	if port, err = FreePort(); err != nil {
		return "", 0, "", err
	}
	if dir, err = tempDir(name); err != nil {
		return "", 0, "", err
	}
	return binary, port, dir, nil
}

// tempDir makes a directory for one proxy's files. It is readable by all
// because nginx, started as root, runs its workers as nobody.
func tempDir(name string) (string, error) {
	dir, err := os.MkdirTemp("", "realproxy-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("realproxy: making a directory for %s: %w", name, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("realproxy: making %s readable: %w", dir, err)
	}
	return dir, nil
}
