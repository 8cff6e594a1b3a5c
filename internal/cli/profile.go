package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// StartCPUProfile profiles the process's CPU into the file at path (made
// anew) until the returned function is called: a command's --cpuprofile,
// for finding where its time per job goes under a load (go tool pprof).
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
