package throttle

import (
	"net/http"
	"time"
)

// ReportItem tells the queue what the server answered to a request it
// never admitted: an item of a JSON batch, which the server throttles on
// its own while the batch itself succeeds. item names the item's method,
// its URL resolved against the batch's service root, and the host the
// batch was sent to; p is Bypass's pass for when the batch was let go,
// given to Refused first when the item's answer was a 503 that named no
// wait (so that a throttle read from it is not taken for the server's
// word); header is the item's answer's, back returns when its answer
// came.
//
// A throttled item holds later requests to its URL and path for hold and
// counts towards the holds inferred for its neighbours, as a throttled
// request does; a successful one counts for its scope's pace. An item is
// never a probe: its answer neither lifts nor confirms an inferred hold.
func (q *Queue) ReportItem(item *http.Request, p Pass, o Outcome, hold time.Duration, header http.Header, back func() time.Time) {
	// Never admitted, the item holds no budget's slot: of its pass, only
	// when it went and how its answer was read count.
	q.Report(item, Pass{Sent: p.Sent, refused: p.refused}, o, hold, header, back)
}
