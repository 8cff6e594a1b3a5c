package ui_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the browser, the admitter and their connections
// are all gone when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
