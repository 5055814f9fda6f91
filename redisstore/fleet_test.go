package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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
// each at its slot, prints the send times (Unix ns) and exits.
const fleetChildEnv = "REDISSTORE_FLEET_CHILD"

// fleetPace is the budget the fleet shares: 200 requests/s, 10 at once.
var fleetPace = Pace{Rate: 200, Burst: 10}

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
	for range n {
		wait, ok, err := s.Reserve(ctx, "graph.microsoft.com", "users", fleetPace, time.Minute)
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
// budget's schedule: together they send no faster than its pace. Alone,
// each would spend the whole burst and rate itself, and the fleet would go
// four times as fast.
func TestFleetOfProcessesSharesOneSchedule(t *testing.T) {
	const procs, each = 4, 50
	prefix := testPrefix(t)
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
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "process %d", i)
		for _, line := range strings.Fields(outs[i].String()) {
			ns, err := strconv.ParseInt(line, 10, 64)
			require.NoError(t, err)
			sent = append(sent, ns)
		}
	}
	require.Len(t, sent, procs*each)
	slices.Sort(sent)
	span := time.Duration(sent[len(sent)-1] - sent[0])
	least := time.Duration(float64(len(sent)-fleetPace.Burst) / fleetPace.Rate * float64(time.Second))
	t.Logf("%d processes sent %d requests in %v; the pace allows them in %v at the soonest", procs, len(sent), span, least)
	assert.GreaterOrEqual(t, span, least-time.Millisecond)
}
