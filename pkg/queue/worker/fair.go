package worker

import (
	"container/heap"
	"math"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The drain's scheduler decides which backlog job the next start of the
// leak goes to (docs/design.md#fair-drain). It sees the backlog as flows:
// the jobs of one key in one priority class, in stream order — one backlog
// subject each. Of each flow it holds a window of jobs, their headers
// only, as the leader's consumer delivers them in stream order (add): up to
// flowLookahead of them while the windows hold fewer than maxLookahead
// jobs past their first flowWindow, so that a backlog within that bound is
// seen whole. A flow whose window had no room for a job is read by subject
// (push) once it has: flowWindow jobs while the flow has due jobs, and up
// to flowLookahead while none of them is due, so that a due job behind
// many that wait (scheduled ones, or a burst whose publishes reached the
// stream out of not-before order) is seen and goes.
//
//   - Among the flows of a class that have a due job, it picks by
//     start-time fair queuing: each flow carries a finish tag in virtual
//     time; a flow that becomes due after being idle starts at the class's
//     virtual time, so it gets the next turn (an idle key saves nothing up);
//     each start advances its flow's tag by tagScale/weight. Over any
//     stretch where flows stay due, their starts are in proportion to their
//     weights, within one start each; a lone due flow gets every start.
//   - The first due job of the flow's window goes: FIFO within key and
//     class among due jobs; a job not due yet holds back nobody behind it.
//   - The highest class with a due flow goes first. With a minimum share m,
//     each lower class with due jobs earns m of a start per start; once it
//     has earned a whole one it goes next, so it keeps at least m of the
//     starts while its jobs are due.
//
// Its cost is bounded by the flows, not by the backlog's depth: per flow a
// window of headers, a tag and a place in a heap; the windows hold at most
// maxLookahead jobs beyond their first flowWindow in all.
type fairSched struct {
	minShare int64 // per mille of the starts each lower class keeps
	flows    map[string]*flow
	classes  [len(spillway.Priorities)]classQueue
	waiting  flowHeap // flows with jobs, none due yet: by their next due time
	order    uint64
	// reads are the flows that need a read from the stream (needsRead);
	// ahead are those whose window has room while they wait (mayReadAhead)
	// and holds fewer than flowWindow jobs, aheadFull those holding more,
	// which may read only while beyond < maxLookahead (readAhead).
	reads, ahead, aheadFull map[*flow]struct{}
	// beyond is how many jobs the windows hold past flowWindow, in all.
	beyond int
	// seen is the last backlog sequence the consumer delivered (passed);
	// linger are the flows with nothing to hold whose last is past it,
	// kept until it passes the lowest of those, lingerLow.
	seen      uint64
	linger    map[*flow]struct{}
	lingerLow uint64
	// keyFlows are the flows of each key token, one per class, for
	// holding a key's flows together (hold); heldUntil, if set, is when a
	// key's pause ends (unix ns, 0: not paused), asked when its flow is
	// made.
	keyFlows  map[string]*[len(spillway.Priorities)]*flow
	heldUntil func(token string) int64
	// weightOf, if set, is a key's weight in force when its flow is
	// picked (the weights may change while its jobs wait); nil, or ok
	// false: the weight stamped on the job.
	weightOf func(key string) (weight int, ok bool)
	// atMax, if set, tells whether one of a job's concurrency keys is at
	// its max by now: the entry key of the first that is ("" if none),
	// and when to look again if nothing changes before (keycap.go). A
	// flow whose first due job's key is at its max is held (capped)
	// until its entry changes (recheck) or that time.
	atMax  func(keys []queue.ConcurrencyKey, now int64) (entry string, until int64)
	capped map[string]map[*flow]struct{} // entry key → the flows it holds
}

// flowWindow is how many jobs of a due flow the scheduler holds.
const flowWindow = 8

// flowLookahead is how many jobs of a waiting flow — none of its jobs due
// — the scheduler may hold, read ahead: a due job behind more jobs than
// that which wait starts only once some of them have gone.
const flowLookahead = 256

// maxLookahead bounds the jobs held past flowWindow over all flows (about
// 60 bytes each): a backlog of about that many jobs is held whole.
const maxLookahead = 1 << 15

// tagScale is a start's cost in virtual time for a flow of weight 1.
const tagScale = 1 << 20

type classQueue struct {
	vtime  uint64   // start tag of the class's last start
	credit int64    // per mille of a start earned through the minimum share
	due    flowHeap // flows with a due job, by start tag
}

// flow is the scheduler's view of one backlog subject.
type flow struct {
	subject string
	class   spillway.Priority
	window  []pendingJob // read and not granted, in stream order
	last    uint64       // the highest sequence read into the window, or skipped
	more    bool         // jobs after last may be in the stream: read them when there is room
	finish  uint64       // finish tag of its last start
	order   uint64       // breaks ties between equal tags: who became due first
	dueIdx  int          // place in its class's due heap, or -1
	waitIdx int          // place in the waiting heap, or -1
	next    int64        // its earliest due time (unix ns) while waiting
	grants  int          // starts granted over the scheduler's life
	beyond  int          // its share of fairSched.beyond
	held    int64        // unix ns: its key is paused until then (hold)
	key     string       // the client key of its jobs (weightOf)
	capOn   string       // the concurrency entry at its max holding it (atMax), or ""
}

// pendingJob is a job of a flow's window.
type pendingJob struct {
	seq      uint64
	due      int64 // unix ns: its not-before, or when it was queued
	enqueued int64
	weight   int
	bad      error // its headers are not a job's: it is dead-lettered
	expires  int64 // unix ns: when it is dead-lettered if not released (0: never)

	// key is its client key, kept on its flow (flow.key) once read.
	key string
	// conc are its concurrency bounds, and id its job id when it has
	// some (the leader matches it with the slots' holders).
	conc []queue.ConcurrencyKey
	id   string
}

// goes reports whether j leaves its flow at the next pick by now: it is
// due, or it is dead-lettered (not a job, or expired) without a start.
func (j pendingJob) goes(now int64) bool {
	return j.due <= now || j.bad != nil || j.expired(now)
}

// expired reports whether j's expiry has come by now.
func (j pendingJob) expired(now int64) bool { return j.expires != 0 && j.expires <= now }

// wakes is when j goes (goes): its due time, or its expiry if sooner.
func (j pendingJob) wakes() int64 {
	if j.expires != 0 && j.expires < j.due {
		return j.expires
	}
	return j.due
}

func newFairSched(minShare float64) *fairSched {
	s := &fairSched{
		minShare: int64(minShare*1000 + 0.5), flows: make(map[string]*flow),
		reads: make(map[*flow]struct{}), ahead: make(map[*flow]struct{}), aheadFull: make(map[*flow]struct{}),
		linger: make(map[*flow]struct{}), lingerLow: math.MaxUint64,
		waiting: flowHeap{less: byNext, place: func(f *flow) *int { return &f.waitIdx }},
	}
	s.keyFlows = make(map[string]*[len(spillway.Priorities)]*flow)
	s.capped = make(map[string]map[*flow]struct{})
	for i := range s.classes {
		s.classes[i].due = flowHeap{less: byTag, place: func(f *flow) *int { return &f.dueIdx }}
	}
	return s
}

// flow returns the flow of subject, making it if needed.
func (s *fairSched) flow(subject string) *flow {
	f := s.flows[subject]
	if f == nil {
		f = &flow{subject: subject, class: queue.SubjectClass(subject), dueIdx: -1, waitIdx: -1}
		s.flows[subject] = f
		token := queue.SubjectToken(subject)
		kf := s.keyFlows[token]
		if kf == nil {
			kf = new([len(spillway.Priorities)]*flow)
			s.keyFlows[token] = kf
		}
		kf[classIndex(f.class)] = f
		if s.heldUntil != nil {
			f.held = s.heldUntil(token)
		}
	}
	return f
}

// add offers a job the leader's consumer delivered: the backlog's jobs
// arrive in stream order, every flow's among the others'. A job at or
// before its flow's last is known already (read by subject ahead of the
// consumer, or granted). The flow's window takes the job while it has
// room — up to flowLookahead jobs, past flowWindow only while the windows
// hold fewer than maxLookahead past theirs (mayHoldBeyond) — so a backlog
// within that bound is held whole and never read by subject. A window
// without room leaves the job in the stream and marks its flow more: the
// flow is read by subject from its last (readFlow) when it has room, and
// its later deliveries are dropped until such a read finds the stream's
// end (exhausted), so that a window never has a gap.
func (s *fairSched) add(subject string, j pendingJob, now int64) {
	f := s.flow(subject)
	defer s.passed(j.seq) // after the look at f.last, which passed may forget
	if j.seq <= f.last {
		return
	}
	if f.more || len(f.window) >= flowLookahead || !s.mayHoldBeyond(f) {
		f.more = true
		s.place(f, now)
		return
	}
	j = f.keep(j)
	f.window = append(f.window, j)
	f.last = j.seq
	s.place(f, now)
}

// passed records that the consumer has delivered the backlog up to seq,
// and forgets the flows that stayed only for a delivery up to their last.
func (s *fairSched) passed(seq uint64) {
	s.seen = max(s.seen, seq)
	if len(s.linger) == 0 || s.seen < s.lingerLow {
		return
	}
	s.lingerLow = math.MaxUint64
	for f := range s.linger {
		if f.last > s.seen {
			s.lingerLow = min(s.lingerLow, f.last)
			continue
		}
		delete(s.linger, f)
		if len(f.window) == 0 && !f.more && s.flows[f.subject] == f {
			delete(s.flows, f.subject)
			s.forgetKeyFlow(f)
		}
	}
}

// push appends j, read from the stream after f's last read, to f's
// window: the reader decides how far to read (needsRead, mayReadAhead).
func (s *fairSched) push(f *flow, j pendingJob, now int64) {
	j = f.keep(j)
	f.window = append(f.window, j)
	f.last = j.seq
	f.more = true
	s.place(f, now)
}

// exhausted records that the stream holds no job of f after its last read.
func (s *fairSched) exhausted(f *flow, now int64) {
	f.more = false
	s.place(f, now)
}

// needsRead reports whether f should be read from the stream: it may hold
// more jobs, and its window is empty, or has room while the flow is due.
// A flow whose first jobs are not due yet is read no further until they
// are, so a backlog that waits costs one read per flow.
func (f *flow) needsRead() bool {
	return f.more && (len(f.window) == 0 || f.dueIdx >= 0 && len(f.window) < flowWindow)
}

// mayReadAhead reports whether f's window has room for jobs the stream may
// hold while f waits for its first due job: reading them lets a later job
// that is due sooner pass the ones not due. The leader reads those at a
// bounded rate, up to flowLookahead jobs, and past flowWindow only while
// the scheduler holds fewer than maxLookahead such jobs (mayHoldBeyond).
func (f *flow) mayReadAhead() bool {
	return f.more && len(f.window) > 0 && len(f.window) < flowLookahead && f.dueIdx < 0
}

// readAhead yields the flows that may read ahead now: those whose window
// holds fewer than flowWindow jobs, then, while the windows hold fewer
// than maxLookahead past theirs, the others. A flow it yields may take
// jobs (push) before the next is yielded. Once the bound is reached, the
// flows with full windows — up to a backlog's depth ÷ flowWindow of them
// — are not walked at all.
func (s *fairSched) readAhead(yield func(*flow) bool) {
	for f := range s.ahead {
		if !yield(f) {
			return
		}
	}
	for f := range s.aheadFull {
		if s.beyond >= maxLookahead || !yield(f) {
			return
		}
	}
}

// mayReadAheadSoon reports whether some flow may read ahead now or once
// the windows hold fewer jobs past theirs.
func (s *fairSched) mayReadAheadSoon() bool { return len(s.ahead) > 0 || len(s.aheadFull) > 0 }

// mayHoldBeyond reports whether f's window may take one more job read
// ahead.
func (s *fairSched) mayHoldBeyond(f *flow) bool {
	return len(f.window) < flowWindow || s.beyond < maxLookahead
}

// place puts f where it belongs: due, waiting for its first due job, or
// gone when it holds nothing and nothing more is in the stream.
func (s *fairSched) place(f *flow, now int64) {
	defer func() {
		b := max(len(f.window)-flowWindow, 0)
		s.beyond += b - f.beyond
		f.beyond = b
		if f.needsRead() {
			s.reads[f] = struct{}{}
		} else {
			delete(s.reads, f)
		}
		delete(s.ahead, f)
		delete(s.aheadFull, f)
		switch {
		case !f.mayReadAhead():
		case len(f.window) < flowWindow:
			s.ahead[f] = struct{}{}
		default:
			s.aheadFull[f] = struct{}{}
		}
	}()
	s.uncap(f)
	due, next, first := false, int64(0), 0
	for i, j := range f.window {
		if j.goes(now) {
			due, first = true, i
			break
		}
		if i == 0 || j.wakes() < next {
			next = j.wakes()
		}
	}
	if f.held > now && len(f.window) > 0 {
		// Its key is paused: it waits for the pause's end, as for a job
		// not due yet.
		if due || f.held > next {
			next = f.held
		}
		due = false
	}
	if due && s.atMax != nil {
		if until, capped := s.capFlow(f, first, next, now); capped {
			next, due = until, false
		}
	}
	c := &s.classes[classIndex(f.class)]
	switch {
	case due:
		if f.waitIdx >= 0 {
			heap.Remove(&s.waiting, f.waitIdx)
		}
		if f.dueIdx < 0 {
			// Due after being idle: it starts at the class's virtual time,
			// after the flows that were due before it.
			f.finish = max(f.finish, c.vtime)
			s.order++
			f.order = s.order
			heap.Push(&c.due, f)
		}
	case len(f.window) > 0:
		if f.dueIdx >= 0 {
			heap.Remove(&c.due, f.dueIdx)
		}
		f.next = next
		if f.waitIdx >= 0 {
			heap.Fix(&s.waiting, f.waitIdx)
		} else {
			heap.Push(&s.waiting, f)
		}
	default:
		if f.dueIdx >= 0 {
			heap.Remove(&c.due, f.dueIdx)
		}
		if f.waitIdx >= 0 {
			heap.Remove(&s.waiting, f.waitIdx)
		}
		switch {
		case f.more:
		case f.last > s.seen:
			// Read by subject ahead of the consumer: it stays, so that the
			// delivery of a job it held is known (add), until the
			// consumer has passed its last (passed).
			s.linger[f] = struct{}{}
			s.lingerLow = min(s.lingerLow, f.last)
		default:
			delete(s.flows, f.subject)
			s.forgetKeyFlow(f)
		}
	}
}

// keep records the client key of j on its flow f (every job of a flow has
// the same key) and returns j without it, so that a window holds it once.
func (f *flow) keep(j pendingJob) pendingJob {
	if j.key != "" {
		f.key, j.key = j.key, ""
	}
	return j
}

// weight is the weight of flow f for the start of its job j: the weight
// in force for its key (weightOf), else the one stamped on j.
func (s *fairSched) weight(f *flow, j pendingJob) int {
	if s.weightOf != nil {
		if w, ok := s.weightOf(f.key); ok {
			return min(max(w, 1), queue.MaxWeight)
		}
	}
	return max(j.weight, 1)
}

// hold keeps the flows of the key whose token is token from being picked
// until until (unix ns): its key's downstream pushed back. Each flow
// waits for the pause's end as for a job not due yet, and becomes due
// then with the class's virtual time, as any flow due after being idle.
// A hold is extended, never shortened.
func (s *fairSched) hold(token string, until, now int64) {
	kf := s.keyFlows[token]
	if kf == nil {
		return
	}
	for _, f := range kf {
		if f != nil && until > f.held {
			f.held = until
			s.place(f, now)
		}
	}
}

// capFlow reports whether f, due, is held because the key of its first
// due job (window[first]) is at its max, and until when: it waits for a
// slot of that key to free (recheck), or for the time atMax says, or its
// job's expiry — or for one of the jobs before it to become due (before:
// the soonest) — as for a job not due yet.
func (s *fairSched) capFlow(f *flow, first int, before, now int64) (until int64, capped bool) {
	j := f.window[first]
	if len(j.conc) == 0 || j.bad != nil || j.expired(now) {
		return 0, false
	}
	entry, until := s.atMax(j.conc, now)
	if entry == "" {
		return 0, false
	}
	if j.expires != 0 {
		until = min(until, j.expires)
	}
	if first > 0 {
		until = min(until, before)
	}
	f.capOn = entry
	if s.capped[entry] == nil {
		s.capped[entry] = make(map[*flow]struct{})
	}
	s.capped[entry][f] = struct{}{}
	return until, true
}

// uncap forgets that f is held for a concurrency key at its max.
func (s *fairSched) uncap(f *flow) {
	if f.capOn == "" {
		return
	}
	if m := s.capped[f.capOn]; m != nil {
		delete(m, f)
		if len(m) == 0 {
			delete(s.capped, f.capOn)
		}
	}
	f.capOn = ""
}

// recheck looks again at the flows held for the concurrency entry entry,
// which changed: a slot of it may have freed.
func (s *fairSched) recheck(entry string, now int64) {
	m := s.capped[entry]
	if len(m) == 0 {
		return
	}
	flows := make([]*flow, 0, len(m))
	for f := range m {
		flows = append(flows, f)
	}
	for _, f := range flows {
		s.place(f, now)
	}
}

// forgetKeyFlow drops f, which the scheduler forgets, from keyFlows.
func (s *fairSched) forgetKeyFlow(f *flow) {
	token := queue.SubjectToken(f.subject)
	kf := s.keyFlows[token]
	if kf == nil {
		return
	}
	kf[classIndex(f.class)] = nil
	if *kf == ([len(spillway.Priorities)]*flow{}) {
		delete(s.keyFlows, token)
	}
}

// wake makes due the waiting flows whose first job is due by now.
func (s *fairSched) wake(now int64) {
	for s.waiting.Len() > 0 && s.waiting.flows[0].next <= now {
		f := heap.Pop(&s.waiting).(*flow)
		s.place(f, now)
	}
}

// nextDue is when the first waiting flow becomes due, and false if none
// waits.
func (s *fairSched) nextDue() (int64, bool) {
	if s.waiting.Len() == 0 {
		return 0, false
	}
	return s.waiting.flows[0].next, true
}

// pickClass is the class the next start goes to: the highest with a due
// flow, or a lower one that has earned a start through the minimum share.
// It settles the credits as if the start were made.
func (s *fairSched) pickClass() (int, bool) {
	top := -1
	for i := range s.classes {
		if s.classes[i].due.Len() > 0 {
			top = i
			break
		}
	}
	if top < 0 {
		return 0, false
	}
	pick := top
	if s.minShare > 0 {
		for i := top + 1; i < len(s.classes); i++ {
			c := &s.classes[i]
			if c.due.Len() == 0 {
				continue
			}
			c.credit = min(c.credit+s.minShare, 1000)
			if c.credit >= 1000 && pick == top {
				pick = i
			}
		}
	}
	c := &s.classes[pick]
	c.credit = max(c.credit-1000, 0)
	return pick, true
}

// peek reports whether a job is due.
func (s *fairSched) peek(now int64) bool {
	s.wake(now)
	for i := range s.classes {
		if s.classes[i].due.Len() > 0 {
			return true
		}
	}
	return false
}

// pick takes the next job to start, from the flow it picks, and advances
// that flow's tag — unless the job leaves without a start (not a job, or
// expired). ok is false when no job is due.
func (s *fairSched) pick(now int64) (f *flow, j pendingJob, ok bool) {
	s.wake(now)
	ci, ok := s.pickClass()
	if !ok {
		return nil, pendingJob{}, false
	}
	c := &s.classes[ci]
	f = c.due.flows[0]
	i := 0
	for ; i < len(f.window); i++ {
		if f.window[i].goes(now) {
			break
		}
	}
	j = f.window[i]
	f.window = append(f.window[:i], f.window[i+1:]...)
	if j.bad != nil || j.expired(now) {
		// It leaves without a start (dead-lettered): its flow keeps its
		// tag and its place.
		s.place(f, now)
		return f, j, true
	}
	start := max(c.vtime, f.finish)
	c.vtime = start
	f.finish = start + tagScale/uint64(s.weight(f, j))
	f.grants++
	heap.Remove(&c.due, f.dueIdx)
	s.order++
	f.order = s.order
	s.place(f, now)
	return f, j, true
}

// putBack returns a job that pick took but that could not be granted to
// the front of its flow's window: it goes next in its flow.
func (s *fairSched) putBack(subject string, j pendingJob, now int64) {
	f := s.flow(subject)
	i := 0
	for i < len(f.window) && f.window[i].seq < j.seq {
		i++
	}
	f.window = append(f.window[:i], append([]pendingJob{j}, f.window[i:]...)...)
	f.last = max(f.last, j.seq)
	if len(f.window) > flowLookahead { // the window's last goes back to the stream
		f.last = f.window[flowLookahead-1].seq
		f.window = f.window[:flowLookahead]
		f.more = true
	}
	s.place(f, now)
}

// flowHeap is a heap of flows that keeps each flow's place in it (at
// *place(f), -1 when out), so that a flow can be taken out from anywhere.
type flowHeap struct {
	flows []*flow
	less  func(a, b *flow) bool
	place func(f *flow) *int
}

func (h *flowHeap) Len() int           { return len(h.flows) }
func (h *flowHeap) Less(i, j int) bool { return h.less(h.flows[i], h.flows[j]) }
func (h *flowHeap) Swap(i, j int) {
	h.flows[i], h.flows[j] = h.flows[j], h.flows[i]
	*h.place(h.flows[i]), *h.place(h.flows[j]) = i, j
}
func (h *flowHeap) Push(x any) {
	f := x.(*flow)
	*h.place(f) = len(h.flows)
	h.flows = append(h.flows, f)
}
func (h *flowHeap) Pop() any {
	f := h.flows[len(h.flows)-1]
	h.flows[len(h.flows)-1] = nil
	h.flows = h.flows[:len(h.flows)-1]
	*h.place(f) = -1
	return f
}

// byTag orders a class's due flows by start tag, then by when they became
// due; byNext orders waiting flows by their next due time.
func byTag(a, b *flow) bool {
	if a.finish != b.finish {
		return a.finish < b.finish
	}
	return a.order < b.order
}
func byNext(a, b *flow) bool { return a.next < b.next }

// classIndex is class p's place in fairSched.classes, which are in
// spillway.Priorities' order: 0 for the highest.
func classIndex(p spillway.Priority) int { return int(p - spillway.High) }
