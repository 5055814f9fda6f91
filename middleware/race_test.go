//go:build race

package middleware

// raceEnabled reports a build with the race detector, under which sync.Pool
// drops items at random and allocation counts vary.
const raceEnabled = true
