package throttle

import (
	"container/heap"
	"time"
)

// waiter is one request held in a budget's queue.
type waiter struct {
	notBefore time.Time
	// refused is when a bare 429 to the request's attempt before came
	// back, zero once the host served a request sent after it, or when
	// there was none (Queue.AdmitEarly).
	refused  time.Time
	eligible time.Time
	seq      uint64
	index    int
	wake     chan struct{}
}

// waiterHeap orders waiters by when they become eligible, then by arrival,
// so that requests released by the same throttle's end leave in FIFO order.
type waiterHeap []*waiter

func (h waiterHeap) Len() int { return len(h) }

func (h waiterHeap) Less(i, j int) bool {
	if c := h[i].eligible.Compare(h[j].eligible); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}

func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}

func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// push adds w, waking the head it displaces so that it looks again.
func (h *waiterHeap) push(w *waiter) {
	var prev *waiter
	if len(*h) > 0 {
		prev = (*h)[0]
	}
	heap.Push(h, w)
	if prev != nil && (*h)[0] == w {
		signal(prev)
	}
}

// remove takes w out, waking the next head when w was the head.
func (h *waiterHeap) remove(w *waiter) {
	top := (*h)[0] == w
	heap.Remove(h, w.index)
	if top {
		h.kick()
	}
}

// kick wakes the head waiter so that it looks at the state again.
func (h waiterHeap) kick() {
	if len(h) > 0 {
		signal(h[0])
	}
}

// wakeAll wakes every waiter: what they wait for changed.
func (h waiterHeap) wakeAll() {
	for _, w := range h {
		signal(w)
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
