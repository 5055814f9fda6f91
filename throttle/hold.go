package throttle

import (
	"fmt"
	"time"
)

// HoldError is the error Admit returns, at once, when the throttles the
// request matches would hold it past its deadline. It wraps
// ErrHoldTooLong. Until is when the request may go at the earliest, as far
// as the queue can tell without holding it: a caller that passes its own
// time as the deadline learns, without waiting, whether the queue would
// hold it and until when.
type HoldError struct {
	Until time.Time
}

func (e *HoldError) Error() string {
	return fmt.Sprintf("%v: until %s", ErrHoldTooLong, e.Until.Format(time.RFC3339Nano))
}

// Unwrap returns ErrHoldTooLong.
func (e *HoldError) Unwrap() error { return ErrHoldTooLong }
