package redisbucket

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The cluster the tests share outlives them: stop it before looking
	// for leaked goroutines (its processes' reapers).
	redistest.StopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
