package throttletest

import (
	"net/http"
	"strings"
	"time"
)

// GraphBudgets are budgets shaped like Microsoft Graph's, all on one host:
// a service's requests draw only from that service's budget, and Outlook's
// budget is per mailbox. Paths are read below a leading version segment
// (/v1.0, /beta). A zero Bucket turns its budget off.
type GraphBudgets struct {
	// Identity throttles directory requests: /users/{id}, /users,
	// /groups..., /applications..., /directoryObjects..., /me, but not
	// the mailbox paths below a user.
	Identity Bucket
	// Mailbox throttles each mailbox separately: /users/{id}/messages,
	// /events, /mailFolders, /calendar, /contacts and what is below them,
	// and the same below /me.
	Mailbox Bucket
	// Sites throttles /sites/... as one budget.
	Sites Bucket
	// Drives throttles each drive separately: /drives/{id}/....
	Drives Bucket
	// Locked reports whether an item, /drives/{drive}/items/{item}/...,
	// is locked: it answers 429 on its own, from its first request until
	// LockedFor has passed, whatever its drive's budget. nil: none is.
	Locked func(drive, item string) bool
	// LockedFor is how long a locked item stays locked after its first
	// request. 0: 2 s.
	LockedFor time.Duration
}

// Rules returns the rules that make the budgets, for Config.Rules. Their
// names, in Stats.ThrottledBy, are "identity", "mailbox", "sites", "drives"
// and "locked".
func (g GraphBudgets) Rules() []Rule {
	var out []Rule
	add := func(name string, b Bucket, match func(segs []string) (string, bool)) {
		if !b.enabled() {
			return
		}
		out = append(out, Rule{
			Name:    name,
			Match:   func(r *http.Request) (string, bool) { return match(graphSegments(r.URL.Path)) },
			Limiter: BucketLimiter(b),
		})
	}
	add("identity", g.Identity, func(segs []string) (string, bool) {
		if _, ok := mailbox(segs); ok || len(segs) == 0 {
			return "", false
		}
		switch segs[0] {
		case "users", "groups", "applications", "directoryObjects", "me":
			return "", true
		}
		return "", false
	})
	add("mailbox", g.Mailbox, mailbox)
	add("sites", g.Sites, func(segs []string) (string, bool) {
		return "", len(segs) > 0 && segs[0] == "sites"
	})
	add("drives", g.Drives, func(segs []string) (string, bool) {
		if len(segs) < 2 || segs[0] != "drives" {
			return "", false
		}
		return segs[1], true
	})
	if g.Locked != nil {
		lockedFor := g.LockedFor
		if lockedFor == 0 {
			lockedFor = 2 * time.Second
		}
		out = append(out, Rule{
			Name: "locked",
			Match: func(r *http.Request) (string, bool) {
				segs := graphSegments(r.URL.Path)
				if len(segs) < 4 || segs[0] != "drives" || segs[2] != "items" || !g.Locked(segs[1], segs[3]) {
					return "", false
				}
				return segs[1] + "/" + segs[3], true
			},
			Limiter: func(_ string, now time.Time) Limiter { return &lock{until: now.Add(lockedFor)} },
		})
	}
	return out
}

// mailbox returns the mailbox a request reads or writes: the user's id
// below /users, "me" below /me.
func mailbox(segs []string) (string, bool) {
	isMail := func(seg string) bool {
		switch seg {
		case "messages", "events", "mailFolders", "calendar", "calendars", "contacts":
			return true
		}
		return false
	}
	switch {
	case len(segs) >= 3 && segs[0] == "users" && isMail(segs[2]):
		return segs[1], true
	case len(segs) >= 2 && segs[0] == "me" && isMail(segs[1]):
		return "me", true
	}
	return "", false
}

// graphSegments returns the segments of path below a leading version
// segment (v1.0, beta).
func graphSegments(path string) []string {
	var segs []string
	for s := range strings.SplitSeq(path, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	if len(segs) > 0 && (segs[0] == "beta" || strings.HasPrefix(segs[0], "v") && len(segs[0]) > 1 && segs[0][1] >= '0' && segs[0][1] <= '9') {
		segs = segs[1:]
	}
	return segs
}

// lock is a Limiter that admits nothing until a time.
type lock struct{ until time.Time }

func (l *lock) Wait(now time.Time, _ float64) time.Duration { return max(l.until.Sub(now), 0) }
func (l *lock) Take(time.Time, float64)                     {}
