package redisbucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// DefaultPrefix starts every key the store writes.
const DefaultPrefix = "spillway:bucket:"

// Defaults of the coalescing options.
const (
	DefaultMaxBatch    = 64
	DefaultMaxInFlight = 2
)

// Bounds of the coalescing options.
const (
	maxMaxBatch    = 1024
	maxMaxInFlight = 64
)

// clockGrace is added to every key's TTL when the store reads an injected
// clock: the script cannot relate that clock to Redis's own, so a key is kept
// for its reset-after plus this much Redis time.
const clockGrace = 5 * time.Minute

var (
	// ErrInvalidOption is wrapped by the error of an option New cannot use.
	ErrInvalidOption = errors.New("redisbucket: invalid option")
	// ErrInvalidGroup is returned for a group holding '{' or '}', which
	// would break the keys' hash tag.
	ErrInvalidGroup = errors.New("redisbucket: invalid group")
	// ErrForeignData is returned when a key the store owns holds data the
	// store did not write (another program wrote under its prefix). Nothing
	// was changed.
	ErrForeignData = errors.New("redisbucket: key holds data this store did not write")

	errMalformed = errors.New("redisbucket: malformed script reply")
	errPanicked  = errors.New("redisbucket: the round trip panicked in another caller's goroutine")
)

// Option configures a Store.
type Option func(*Store) error

// WithClock makes the store decide at now() instead of Redis TIME: for
// simulations and tests. The script then receives the time with every
// decision, and every key's TTL gets five minutes of grace, because the
// injected clock and Redis's clock need not run alike.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		s.clock = now
		return nil
	}
}

// WithPrefix sets the prefix of every key (default DefaultPrefix). It must
// not hold '{' or '}': the store writes the hash tag itself.
func WithPrefix(prefix string) Option {
	return func(s *Store) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("%w: prefix %q holds a brace; the store adds the hash tag itself", ErrInvalidOption, prefix)
		}
		s.prefix = prefix
		return nil
	}
}

// WithMaxBatch bounds how many concurrent decisions share one round trip
// (default DefaultMaxBatch, 1 to 1024). 1 turns coalescing off.
func WithMaxBatch(n int) Option {
	return withCount("max batch", n, maxMaxBatch, func(s *Store) *int { return &s.maxBatch })
}

// WithMaxInFlight bounds how many round trips run at once (default
// DefaultMaxInFlight, 1 to 64); decisions arriving meanwhile wait and go
// together in the next one. Each round trip holds one connection of the
// client's pool.
func WithMaxInFlight(n int) Option {
	return withCount("max in flight", n, maxMaxInFlight, func(s *Store) *int { return &s.maxInFlight })
}

// withCount is an option setting field to n, which must be 1 to hi; what
// names it in the error.
func withCount(what string, n, hi int, field func(*Store) *int) Option {
	return func(s *Store) error {
		if n < 1 || n > hi {
			return fmt.Errorf("%w: %s %d: want 1 to %d", ErrInvalidOption, what, n, hi)
		}
		*field(s) = n
		return nil
	}
}

// WithSplitTiers sets whether a decision runs one script per hash tag of
// its tiers (split.go), as a Redis Cluster or a Ring needs, or one script
// for all its tiers, as one server allows. The default: split for a
// *redis.ClusterClient or *redis.Ring, one script otherwise. A client that
// hides a cluster behind another type needs WithSplitTiers(true).
func WithSplitTiers(split bool) Option {
	return func(s *Store) error {
		s.splitTiers, s.splitSet = split, true
		return nil
	}
}

// WithTimeout bounds each decision (default 0: only the caller's context and
// the client's own timeouts bound it): the wait for a round trip shared with
// other decisions counts, so no decision takes longer than d, and the round
// trip of a decision sending a batch ends when that decision's d runs out.
// Each refund is bounded by d too.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 {
			return fmt.Errorf("%w: timeout %v: want ≥ 0", ErrInvalidOption, d)
		}
		s.timeout = d
		return nil
	}
}

// Store is the Redis bucket.Store: each decision runs as one Lua script, all
// tiers at once, at Redis TIME (or an injected clock). Concurrent decisions
// are coalesced into shared round trips (see the package documentation). A
// Store is safe for concurrent use; build it with New. It holds no
// connection of its own and needs no closing: close the client instead.
type Store struct {
	client      Client
	prefix      string
	clock       func() time.Time // nil: Redis TIME
	maxBatch    int
	maxInFlight int
	timeout     time.Duration
	ttlExtra    int64 // ms added to every TTL
	splitTiers  bool  // one script per hash tag (split.go), not per decision
	splitSet    bool  // WithSplitTiers was given

	mu       sync.Mutex
	queue    []*call // decisions waiting for a round trip, oldest first
	inFlight int     // round trips under way, ≤ maxInFlight

	batchRTs batchSlots // DecideBatch's round trips (batch.go)

	onQueue func(queued int) // tests: after a decision queued
	calls   sync.Pool        // *call
	batches sync.Pool        // *[]*call
}

var _ bucket.Store = (*Store)(nil)

// New returns a store that keeps its state in the Redis server (or cluster,
// or ring) that client talks to.
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	s := &Store{
		client:      client,
		prefix:      DefaultPrefix,
		maxBatch:    DefaultMaxBatch,
		maxInFlight: DefaultMaxInFlight,
		ttlExtra:    1, // TIME has microseconds, expiry milliseconds
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.clock != nil {
		s.ttlExtra = clockGrace.Milliseconds()
	}
	if !s.splitSet {
		switch client.(type) {
		case *redis.ClusterClient, *redis.Ring:
			s.splitTiers = true
		}
	}
	s.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	s.batches.New = func() any { b := make([]*call, 0, s.maxBatch); return &b }
	return s, nil
}

// callState is where a decision is in the coalescing machinery.
type callState uint8

const (
	stateNew     callState = iota
	stateQueued            // in Store.queue
	stateLeading           // handed a round-trip slot: its caller sends the next batch
	stateTaken             // in a batch another decision's caller sends
)

// call is one Decide in flight. Everything the round trip needs is encoded
// when the call is made, so a caller that gives up leaves nothing of its own
// behind.
type call struct {
	group string
	keys  []string
	buf   []byte // headerSize bytes for the script header, then the decision
	// Split decisions only (split.go).
	parts  []part
	cost   int64
	ntiers int

	done  chan struct{} // signalled when dec/err are set, or when leads is
	leads bool          // set before done is signalled: the caller holds a slot
	state callState     // guarded by Store.mu
	dec   bucket.Decision
	err   error
}

// Decide decides one job of the given cost over all tiers, all-or-nothing,
// in one script run. The group is the keys' Redis Cluster hash tag and must
// not hold '{' or '}'.
//
// If ctx ends while the decision waits for a round trip, Decide returns an
// error wrapping ctx.Err(). The decision may nevertheless have been sent and
// applied (its units taken) when the error says so.
func (s *Store) Decide(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	if err := bucket.CheckRequest(tiers, cost); err != nil {
		return bucket.Decision{}, fmt.Errorf("redisbucket: %w", err)
	}
	if s.client == nil {
		return bucket.Decision{}, errors.New("redisbucket: the Store was not built with New")
	}
	if strings.ContainsAny(group, "{}") {
		return bucket.Decision{}, fmt.Errorf("%w %q: it must not hold '{' or '}'", ErrInvalidGroup, group)
	}
	if err := ctx.Err(); err != nil {
		return bucket.Decision{}, fmt.Errorf("redisbucket: %w", err)
	}
	var deadline time.Time
	if s.timeout > 0 {
		// The timeout is the decision's whole budget: the wait for a
		// round-trip slot counts, not only the round trip.
		deadline = time.Now().Add(s.timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	c := s.calls.Get().(*call)
	if s.splitTiers {
		s.encodeParts(c, group, tiers, cost)
	} else {
		s.encode(c, group, tiers, cost)
	}

	s.mu.Lock()
	if s.inFlight < s.maxInFlight {
		// A free slot: send now, with whatever waits.
		s.inFlight++
	} else {
		c.state = stateQueued
		s.queue = append(s.queue, c)
		n := len(s.queue)
		s.mu.Unlock()
		if s.onQueue != nil {
			s.onQueue(n)
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			switch s.withdraw(c) {
			case stateQueued:
				s.recycle(c)
				return bucket.Decision{}, fmt.Errorf("redisbucket: %w (not decided)", ctx.Err())
			case stateTaken:
				// The call belongs to the batch's sender now.
				return bucket.Decision{}, fmt.Errorf("redisbucket: %w (the decision was sent and may have been applied)", ctx.Err())
			}
			// Handed a slot meanwhile: pass it on unused.
			<-c.done
			s.release()
			s.recycle(c)
			return bucket.Decision{}, fmt.Errorf("redisbucket: %w (not decided)", ctx.Err())
		}
		if !c.leads {
			d, err := c.dec, c.err
			s.recycle(c)
			return s.bind(d, err, group, tiers, cost)
		}
		s.mu.Lock()
	}
	// This caller holds a slot: it sends its own decision and the oldest
	// waiting ones.
	batch := s.takeLocked(c)
	s.mu.Unlock()
	s.send(ctx, batch, deadline)
	d, err := c.dec, c.err
	s.recycle(c)
	return s.bind(d, err, group, tiers, cost)
}

// bind binds a decision made without error to s and its request, for
// its refund.
func (s *Store) bind(d bucket.Decision, err error, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	if err == nil {
		d.Bind(s, group, tiers, cost)
	}
	return d, err
}

// Refund gives back the units decision d, which this store made, took from
// its consumed tiers (see bucket.Store.Refund; d.Refund(ctx) calls it): a
// settle at 0 (settle.go), in one run of settle.lua at Redis TIME (or the
// injected clock), under the same keys and hash tag as Decide. A key that
// expired or was deleted has nothing to give back. A decision with
// Consumed 0 needs no round trip: Refund returns nil at once.
//
// Refunds are rare (the backlog was full), so they do not join the
// coalesced decision batches: each is its own round trip, bounded by
// WithTimeout and ctx. Like a decision, a refund is not idempotent: a refund
// that go-redis retries after a network error may give back twice — never
// beyond an empty state, but more than the job took.
func (s *Store) Refund(ctx context.Context, d bucket.Decision) error {
	return s.settle(ctx, d, 0, "refund")
}

// withdraw takes a cancelled caller's call out of the queue if it is still
// there, and reports the state it was in.
func (s *Store) withdraw(c *call) callState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := c.state
	if st == stateQueued {
		for i, q := range s.queue {
			if q == c {
				copy(s.queue[i:], s.queue[i+1:])
				s.queue[len(s.queue)-1] = nil
				s.queue = s.queue[:len(s.queue)-1]
				break
			}
		}
	}
	return st
}

func (s *Store) recycle(c *call) {
	c.state, c.dec, c.err, c.leads, c.group = stateNew, bucket.Decision{}, nil, false, ""
	clear(c.keys)
	c.parts = nil
	s.calls.Put(c)
}

// takeLocked returns a batch: first, then the oldest queued calls, up to
// maxBatch. The caller holds s.mu.
func (s *Store) takeLocked(first *call) []*call {
	batch := *s.batches.Get().(*[]*call)
	batch = append(batch[:0], first)
	first.state = stateLeading
	n := min(len(s.queue), s.maxBatch-1)
	for _, c := range s.queue[:n] {
		c.state = stateTaken
	}
	batch = append(batch, s.queue[:n]...)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return batch
}

// release gives up a round-trip slot: to the oldest waiting caller, who then
// sends a batch, or back to the store.
func (s *Store) release() {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.inFlight--
		s.mu.Unlock()
		return
	}
	next := s.queue[0]
	next.state = stateLeading
	copy(s.queue, s.queue[1:])
	s.queue[len(s.queue)-1] = nil
	s.queue = s.queue[:len(s.queue)-1]
	s.mu.Unlock()
	next.leads = true
	next.done <- struct{}{}
}

// send makes the round trip of a batch whose first call is the caller's,
// wakes the batch's other callers and passes the slot on. deadline, if not
// zero, ends the round trip: the caller's budget (WithTimeout) runs out then.
func (s *Store) send(ctx context.Context, batch []*call, deadline time.Time) {
	if len(batch) > 1 {
		// Others' decisions ride along: the caller's cancellation must not
		// abort them. The caller waits for the round trip.
		ctx = context.WithoutCancel(ctx)
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	finished := false
	defer func() {
		if !finished {
			// roundTrip panicked (in a client hook, say): the panic goes
			// to this caller, but nobody else may wait forever.
			for _, c := range batch {
				c.dec, c.err = bucket.Decision{}, errPanicked
			}
		}
		for _, c := range batch[1:] {
			c.done <- struct{}{}
		}
		// Last, so that the next sender runs before the callers just
		// woken and its batch holds what they queue meanwhile.
		s.release()
		clear(batch)
		batch = batch[:0]
		s.batches.Put(&batch)
	}()
	s.roundTrip(ctx, batch)
	finished = true
}

// request is one script run: the calls of one group in a batch.
type request struct {
	calls []*call
	keys  []string
	blob  []byte
}

// roundTrip runs the batch's decisions, one script run per group, in one
// round trip, and sets every call's dec or err.
func (s *Store) roundTrip(ctx context.Context, batch []*call) {
	if s.splitTiers {
		s.roundTripSplit(ctx, batch)
		return
	}
	if len(batch) == 1 {
		c := batch[0]
		putHeader(c.buf, 1, s.clock != nil, s.ttlExtra)
		s.deliver(s.runScript(ctx, decideScript, c.keys, c.buf), batch)
		return
	}
	reqs := s.split(batch)
	cmds := s.runPipelined(ctx, decideScript, len(reqs),
		func(i int) []string { return reqs[i].keys }, func(i int) []byte { return reqs[i].blob })
	for i := range reqs {
		s.deliver(cmds[i], reqs[i].calls)
	}
}

// split groups a batch by group, keeping arrival order within each.
func (s *Store) split(batch []*call) []request {
	var reqs []request
	for _, c := range batch {
		i := 0
		for i < len(reqs) && reqs[i].calls[0].group != c.group {
			i++
		}
		if i == len(reqs) {
			reqs = append(reqs, request{blob: make([]byte, headerSize, 1024)})
		}
		r := &reqs[i]
		r.calls = append(r.calls, c)
		r.keys = append(r.keys, c.keys...)
		r.blob = append(r.blob, c.buf[headerSize:]...)
	}
	for i := range reqs {
		putHeader(reqs[i].blob, len(reqs[i].calls), s.clock != nil, s.ttlExtra)
	}
	return reqs
}

// deliver sets the result of every call of one script run.
func (s *Store) deliver(cmd *redis.Cmd, calls []*call) {
	if err := cmd.Err(); err != nil {
		err = fmt.Errorf("redisbucket: %w", err)
		for _, c := range calls {
			c.err = err
		}
		return
	}
	raw, ok := cmd.Val().(string)
	if !ok {
		for _, c := range calls {
			c.err = errMalformed
		}
		return
	}
	r := reply{s: raw}
	for i, c := range calls {
		c.dec, c.err = decode(&r, c)
		if errors.Is(c.err, errMalformed) {
			for _, c := range calls[i:] {
				c.err = errMalformed
			}
			return
		}
	}
}
