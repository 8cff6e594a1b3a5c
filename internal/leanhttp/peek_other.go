//go:build !(linux || darwin)

package leanhttp

import "net"

// peeker cannot look into a connection here: an idle connection the
// server closed is found when the request written to it gets no answer
// (an error, not retried) or when the write fails (retried).
type peeker struct{}

func (*peeker) setup(net.Conn) {}

func (*peeker) open() bool { return true }
