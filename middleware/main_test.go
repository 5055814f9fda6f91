package middleware

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// retry handler must leave no timer, wait or connection goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
