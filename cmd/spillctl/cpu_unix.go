//go:build unix

package main

import (
	"syscall"
	"time"
)

// ownCPU is the CPU time (user + system) this process has used so far;
// ok is false where the system does not say.
func ownCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
