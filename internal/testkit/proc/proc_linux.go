//go:build linux

package proc

import (
	"os/exec"
	"syscall"
)

// SetParentDeathSignal makes the kernel SIGKILL the child when the thread that
// started it exits. The Go runtime ends threads only when a goroutine that
// called runtime.LockOSThread returns without unlocking, which test code
// starting servers does not do, so in practice this fires when the test binary
// dies without running its cleanups (a -timeout panic, a crash, SIGKILL).
func SetParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
