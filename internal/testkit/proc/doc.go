// Package proc holds what test kits need to own child processes: servers
// and workers a test starts must not outlive it.
package proc
