package bucket

import (
	"sync/atomic"
	"time"
)

// wallClock reads Unix nanoseconds with one clock read instead of
// time.Now's two: it adds time.Since(base) — which reads only the monotonic
// clock — to the wall time of a base taken by time.Now, and takes a new base
// every second so the wall clock's steps and slewing are followed.
//
// Between two bases it is as exact as the monotonic clock; across a re-base
// it may step back by what the wall clock was adjusted, which the algorithms
// treat as no time passing.
type wallClock struct {
	base atomic.Pointer[clockBase]
}

type clockBase struct {
	wall int64     // Unix ns of mono
	mono time.Time // carries a monotonic reading
}

const rebaseEvery = time.Second

func (c *wallClock) now() int64 {
	b := c.base.Load()
	if b != nil {
		if d := time.Since(b.mono); d >= 0 && d < rebaseEvery {
			return b.wall + int64(d)
		}
	}
	now := time.Now()
	c.base.Store(&clockBase{wall: now.UnixNano(), mono: now})
	return now.UnixNano()
}
