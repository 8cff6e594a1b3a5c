//go:build !linux

package proc

import "os/exec"

// SetParentDeathSignal is Linux-only; elsewhere an orphaned child is possible
// if the test binary dies without running its cleanups.
func SetParentDeathSignal(*exec.Cmd) {}
