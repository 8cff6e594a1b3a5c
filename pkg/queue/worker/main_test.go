package worker_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(childMain(cfg)) // a worker process of process_test.go
	}
	goleak.VerifyTestMain(m)
}
