package outage

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// held request must leave no timer or wait behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
