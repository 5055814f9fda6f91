package redisstore

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the package's shared server, runs the tests, stops the server
// and then looks for goroutines left behind.
func run(m *testing.M) int {
	// go-redis logs each connection the fault tests break.
	redis.SetLogger(quiet{})
	if spec := os.Getenv(fleetChildEnv); spec != "" {
		return fleetChild(spec)
	}
	dir, err := os.MkdirTemp("", "redisstore-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	shared, err = startServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	shared.kill()
	if code == 0 {
		// A client that failed to dial redials from a goroutine of its own
		// once a second until it is closed; it ends within that second.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// quiet discards go-redis's log.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}
