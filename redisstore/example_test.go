package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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
	slot, err := store.Reserve(ctx, host, "users", redisstore.Pace{Rate: 400, Burst: 40}, 10*time.Second)
	switch {
	case errors.Is(err, redisstore.ErrUnavailable):
		// pace by this process's own state
	case slot.OK:
		// Wait for the slot the fleet's schedule gave this request.
		t := time.NewTimer(slot.Wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// When Redis cannot be reached, a call fails open at once with
// ErrUnavailable: the process goes on with its own state, and the store
// never costs it a request.
func Example_unavailable() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // nothing listens there
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	err = store.MarkActive(context.Background(), "graph.microsoft.com")
	fmt.Println("unavailable:", errors.Is(err, redisstore.ErrUnavailable))
	// Output:
	// unavailable: true
}
