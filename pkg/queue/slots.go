package queue

import "sync"

// slots are a worker's handlers, Concurrency of them, shared by READY jobs
// and backlog jobs: together they never run more than that.
type slots struct {
	mu      sync.Mutex
	size    int
	busy    int           // taken: a handler runs or is about to start
	waiting int           // callers of take waiting for a slot
	freed   chan struct{} // closed, and replaced, when a slot is put back
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
	close(s.freed)
	s.freed = make(chan struct{})
}

// idle reports whether a slot is free that nobody waits for.
func (s *slots) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size-s.busy-s.waiting > 0
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
