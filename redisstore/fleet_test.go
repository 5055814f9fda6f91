package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleetChildEnv, when set to "addr prefix requests", makes the test binary
// one process of a fleet: it reserves that many slots of one budget, sends
// each at its slot, and prints when it began reserving, then each send's
// time (Unix ns), before it exits.
const fleetChildEnv = "REDISSTORE_FLEET_CHILD"

// fleetFitted is the rate the fleet's throttles fitted for the budget the
// fleet shares, which allows a burst of a tenth of a second of it;
// fleetShare is the pace each of the four processes gives.
var (
	fleetFitted = 200.0
	fleetShare  = Pace{Rate: 50, Burst: 2}
)

// fleetChild runs one process of the fleet and returns its exit code.
func fleetChild(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want \"addr prefix requests\"\n", fleetChildEnv, spec)
		return 2
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: f[0]})
	defer rdb.Close()
	s, err := New(rdb, WithPrefix(f[1]), WithTimeout(testTimeout))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	fmt.Fprintln(out, time.Now().UnixNano())
	for range n {
		res, err := s.Reserve(ctx, "graph.microsoft.com", "users", fleetShare, time.Minute)
		wait, ok := res.Wait, res.OK
		if err != nil || !ok {
			fmt.Fprintln(os.Stderr, "reserve:", ok, err)
			return 1
		}
		// The timer never fires early: a request goes at its slot or after.
		time.Sleep(wait)
		fmt.Fprintln(out, time.Now().UnixNano())
	}
	return 0
}

// Separate OS processes, each with its own store and client, share one
// budget's schedule: together they send no faster than its fitted rate. Alone,
// each would spend the whole burst and rate itself, and the fleet would go
// four times as fast.
func TestFleetOfProcessesSharesOneSchedule(t *testing.T) {
	const procs, each = 4, 50
	prefix := testPrefix(t)
	fitSchedule(t, newStoreOn(t, newClient(t, shared), WithPrefix(prefix)), "graph.microsoft.com", "users", fleetFitted)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", fleetChildEnv, shared.addr(), prefix, each))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		require.NoError(t, cmd.Start())
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	var sent []int64
	began := int64(math.MaxInt64)
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "process %d", i)
		lines := strings.Fields(outs[i].String())
		require.Len(t, lines, each+1, "process %d", i)
		for j, line := range lines {
			ns, err := strconv.ParseInt(line, 10, 64)
			require.NoError(t, err)
			if j == 0 {
				began = min(began, ns)
			} else {
				sent = append(sent, ns)
			}
		}
	}
	// The schedule began at the first reservation, after the first process
	// began reserving; the k-th send is no earlier than the k-th slot, so
	// the last is no earlier than the last slot.
	last := time.Duration(slices.Max(sent) - began)
	least := time.Duration(float64(len(sent)-int(fleetFitted*minBurst)) / fleetFitted * float64(time.Second))
	t.Logf("%d processes sent %d requests %v after they began; the pace allows it after %v at the soonest",
		procs, len(sent), last, least)
	assert.GreaterOrEqual(t, last, least)
}
