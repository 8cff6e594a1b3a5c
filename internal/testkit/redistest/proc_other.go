//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere an orphaned child is possible
// if the test binary dies without running its cleanups.
func setParentDeathSignal(*exec.Cmd) {}
