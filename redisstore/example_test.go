package redisstore_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kiota-resilience/kiota-resilience-go/redisstore"
)

// A process paces its requests to a throttled budget by the fleet's
// schedule, and falls back to its own pacing when Redis is away.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	const host = "graph.microsoft.com"
	if !store.Active(host) {
		return // no process saw this host throttled: send at once, no round trip
	}
	wait, ok, err := store.Reserve(ctx, host, "users", redisstore.Pace{Rate: 400, Burst: 40}, 10*time.Second)
	switch {
	case errors.Is(err, redisstore.ErrUnavailable):
		// pace by this process's own state
	case ok:
		// Wait for the slot the fleet's schedule gave this request.
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
