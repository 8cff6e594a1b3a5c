//go:build linux || darwin

package leanhttp

import (
	"errors"
	"net"
	"syscall"
)

// peeker tells whether an idle connection is still open with one
// non-blocking peek at its socket (a system call of a fraction of a
// microsecond): without a goroutine reading every idle connection, as
// net/http's has, this is how a connection the server closed while it was
// idle is found before a request is written to it.
type peeker struct {
	raw syscall.RawConn
	fn  func(fd uintptr) bool // made once: no allocation per peek
	err error
	buf [1]byte
}

func (p *peeker) setup(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.raw = raw
	p.fn = func(fd uintptr) bool {
		_, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}
}

// open reports whether the connection has nothing to read: no byte (an
// idle connection expects none), no end and no error. It is true for a
// connection it cannot look into.
func (p *peeker) open() bool {
	if p.raw == nil {
		return true
	}
	if err := p.raw.Read(p.fn); err != nil {
		return false
	}
	return errors.Is(p.err, syscall.EAGAIN)
}
