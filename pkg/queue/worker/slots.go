package worker

import "sync"

// slots are a worker's handlers, Concurrency of them, shared by READY jobs
// and backlog jobs: together they never run more than that.
type slots struct {
	mu      sync.Mutex
	size    int
	busy    int // taken: a handler runs or is about to start
	waiting int // callers of take waiting for a slot
	// reserved are promised to backlog grants waiting for their booked
	// start, and taken (claim) at the start. A READY pull may still use
	// them: READY jobs go first, and a grant whose slot was taken goes
	// back for another worker.
	reserved int
	freed    chan struct{} // closed, and replaced, when a slot is put back
}

func newSlots(n int) *slots {
	return &slots{size: n, freed: make(chan struct{})}
}

// tryTake takes a free slot if there is one.
func (s *slots) tryTake() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy < s.size {
		s.busy++
		return true
	}
	return false
}

// take waits for a free slot and takes it. It reports false if done closes
// first. While it waits, the slot it waits for is not offered to a pull.
func (s *slots) take(done <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting++
	defer func() { s.waiting-- }()
	for s.busy >= s.size {
		if !s.waitLocked(done) {
			return false
		}
	}
	s.busy++
	return true
}

// waitLocked waits, with s.mu released, until a slot is put back or done
// closes; it reports false for done. s.mu is held again when it returns.
func (s *slots) waitLocked(done <-chan struct{}) bool {
	ch := s.freed
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-ch:
		return true
	case <-done:
		return false
	}
}

// put gives a slot back.
func (s *slots) put() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	s.signalLocked()
}

// free is how many slots nobody has taken, waits for or reserved.
func (s *slots) free() int { return s.size - s.busy - s.waiting - s.reserved }

// reserve waits until a slot is free and promises it to a grant, without
// taking it: until the grant's start, a READY job that arrives may still
// use it. It reports false if done closes first.
func (s *slots) reserve(done <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.free() <= 0 {
		if !s.waitLocked(done) {
			return false
		}
	}
	s.reserved++
	return true
}

// unreserve gives a promise back.
func (s *slots) unreserve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved--
	s.signalLocked()
}

// claim turns a promise into a taken slot, if one is free; otherwise the
// promise is given back and claim reports false.
func (s *slots) claim() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved--
	if s.busy < s.size {
		s.busy++
		return true
	}
	s.signalLocked()
	return false
}

// signalLocked wakes the callers waiting for a slot.
func (s *slots) signalLocked() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// room waits until slots are free that nobody waits for, and returns how
// many — without taking them: a pull asks for that many jobs, and each job
// it brings takes a slot as it arrives. It returns 0 if done closes first.
func (s *slots) room(done <-chan struct{}) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if n := s.size - s.busy - s.waiting; n > 0 {
			return n
		}
		if !s.waitLocked(done) {
			return 0
		}
	}
}
