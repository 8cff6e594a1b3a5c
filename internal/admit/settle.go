package admit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// Settling a job's cost (docs/design.md#cost-settled-from-the-answer): the
// admitter stamps on every job its tiers charged what a settle needs
// (queue.HeaderCharge); a worker whose handler reported another actual
// cost sends the stamp back in a settle request, and an admitter that can
// reach the store that decided settles the cost there (bucket.Store.Settle).

const (
	// SettlePrefix + route is the subject of settle requests: route is
	// SettleShared (every admitter of the shared store answers, in the
	// queue group AdmitterSettleGroup) or one admitter's id (its memory
	// store decided).
	SettlePrefix = "spillway.settle."
	// SettleShared is the route of a job the shared store (Redis) decided.
	SettleShared = "shared"
	// AdmitterSettleGroup is the queue group of the shared route.
	AdmitterSettleGroup = "spillway-admitters"
)

// ErrBadSettle is wrapped by the error of a settle request that cannot be
// applied: a malformed or foreign charge, an actual cost out of range.
var ErrBadSettle = errors.New("admit: bad settle request")

// NewInstanceID returns a random id for an admitter: the route of the jobs
// its memory store decides.
func NewInstanceID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("admit: instance id: %w", err)
	}
	return "a" + hex.EncodeToString(b[:]), nil
}

// chargeOf is the queue.HeaderCharge value for decision d of a job of cost
// units over tiers, taken by src: "" when no tier took the job's units or
// no store decided (failure mode open), or when the decision was local and
// the admitter has no id to route a settle to.
func (a *Admitter) chargeOf(tiers []bucket.Tier, cost int64, d bucket.Decision, src Source) string {
	if d.Consumed == 0 || (src != FromPrimary && src != FromLocal) {
		return ""
	}
	route := SettleShared
	if src == FromLocal || a.o.Store.primary == nil {
		route = a.o.InstanceID
	}
	if route == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString(route)
	b.WriteByte(';')
	b.WriteString(strconv.FormatInt(d.At.UnixNano(), 10))
	b.WriteByte(';')
	b.WriteString(strconv.FormatInt(cost, 10))
	sep := byte(';')
	at := d.At.UnixNano()
	for i := range tiers {
		if d.Consumed&(1<<uint(i)) != 0 {
			b.WriteByte(sep)
			b.WriteString(tiers[i].Key)
			if t := d.TierAt[i]; t != 0 && t != at {
				// A Redis Cluster decided this tier at its shard's time.
				b.WriteByte('@')
				b.WriteString(strconv.FormatInt(t, 10))
			}
			sep = ','
		}
	}
	return b.String()
}

// withCharge returns h with the charge c set, copying h first: a job's
// header map may be the request's own.
func withCharge(h nats.Header, c string) nats.Header {
	out := make(nats.Header, len(h)+1)
	for k, vs := range h {
		out[k] = vs
	}
	out[queue.HeaderCharge] = []string{c}
	return out
}

// Charge is a parsed queue.HeaderCharge.
type Charge struct {
	Route string
	At    time.Time
	Cost  int64
	Keys  []string // the bucket keys of the tiers that took the job's units
	// TierAt is, by index of Keys, the time a tier was decided when it
	// is not At (Unix ns; 0: At): a Redis Cluster decides each hash
	// tag's tiers at its own shard's time ("<tier key>@<ns>").
	TierAt []int64
}

// ParseCharge reads a queue.HeaderCharge value, or says what is wrong with it.
func ParseCharge(v string) (Charge, error) {
	bad := func(format string, args ...any) (Charge, error) {
		return Charge{}, fmt.Errorf("%w: header %s %.120q: %s", ErrBadSettle, queue.HeaderCharge, v, fmt.Sprintf(format, args...))
	}
	parts := strings.Split(v, ";")
	if len(parts) != 4 {
		return bad("want <route>;<decision time, Unix ns>;<cost>;<tier key>[,<tier key>...]")
	}
	c := Charge{Route: parts[0]}
	if c.Route == "" || !isSubjectToken(c.Route) {
		return bad("route %.40q is not a subject token", c.Route)
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || at <= 0 {
		return bad("decision time %.40q: want Unix nanoseconds > 0", parts[1])
	}
	c.At = time.Unix(0, at)
	if c.Cost, err = strconv.ParseInt(parts[2], 10, 64); err != nil || c.Cost < 1 || c.Cost > bucket.MaxActualCost {
		return bad("cost %.40q: want an integer from 1 to %d", parts[2], bucket.MaxActualCost)
	}
	c.Keys = strings.Split(parts[3], ",")
	if len(c.Keys) > bucket.MaxTiers {
		return bad("%d tier keys: want 1 to %d", len(c.Keys), bucket.MaxTiers)
	}
	c.TierAt = make([]int64, len(c.Keys))
	for i, k := range c.Keys {
		if k, t, ok := strings.Cut(k, "@"); ok {
			n, err := strconv.ParseInt(t, 10, 64)
			if err != nil || n <= 0 {
				return bad("tier %d's time %.40q: want Unix nanoseconds > 0", i, t)
			}
			c.Keys[i], c.TierAt[i] = k, n
		}
		if c.Keys[i] == "" {
			return bad("an empty tier key")
		}
	}
	return c, nil
}

func isSubjectToken(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// tierOfKey rebuilds the tier of bucket key key ("<tier index>:<token>",
// with an override's suffix) of queue q: the limit the tier has now (with
// the override the suffix names), as a decision now would use it.
func tierOfKey(q *config.Queue, key string) (bucket.Tier, error) {
	idx, rest, ok := strings.Cut(key, ":")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil || i < 0 || i >= len(q.Limits) || rest == "" {
		return bucket.Tier{}, fmt.Errorf("%w: tier key %.60q: want <tier index>:<key token> with a tier of queue %s", ErrBadSettle, key, q.Name)
	}
	l := q.Limits[i]
	if l.Shadow() {
		return bucket.Tier{}, fmt.Errorf("%w: tier key %.60q names shadow tier %s, which never charges", ErrBadSettle, key, l.Name)
	}
	t := bucket.Tier{Key: key, Limit: l.Limit}
	if _, suffix, ok := strings.Cut(rest, "~"); ok {
		found := false
		for _, o := range l.Overrides.List() {
			if o.BucketSuffix() == "~"+suffix {
				t.Limit, found = o.Limit, true
				break
			}
		}
		if !found {
			return bucket.Tier{}, fmt.Errorf("%w: tier key %.60q: tier %s has no such override now", ErrBadSettle, key, l.Name)
		}
	}
	return t, nil
}

// Settled is what a settle did: the units given back (Delta < 0) or taken
// (Delta > 0) in each tier that charged the job.
type Settled struct {
	Queue string
	Delta int64
}

// SettleCost settles the cost of job jobID of queue queueName, charged as
// charge says (a queue.HeaderCharge value), at actual units, in the store
// that decided it. A job is settled once: a second request for it (a
// worker's retry, a job run again) is answered with ok and changes
// nothing. Errors wrap ErrBadSettle for a request that can never apply.
func (a *Admitter) SettleCost(ctx context.Context, queueName, jobID, charge string, actual int64) (Settled, error) {
	if actual < 0 || actual > bucket.MaxActualCost {
		return Settled{}, fmt.Errorf("%w: actual cost %d: want 0 to %d", ErrBadSettle, actual, bucket.MaxActualCost)
	}
	if jobID == "" || len(jobID) > 64 {
		return Settled{}, fmt.Errorf("%w: job id %.80q: want 1 to 64 bytes", ErrBadSettle, jobID)
	}
	c, err := ParseCharge(charge)
	if err != nil {
		return Settled{}, err
	}
	q := a.Config().Queue(queueName)
	if q == nil {
		return Settled{}, fmt.Errorf("%w: no queue %.80q", ErrBadSettle, queueName)
	}
	store, err := a.settleStore(c.Route)
	if err != nil {
		return Settled{}, err
	}
	tiers := make([]bucket.Tier, len(c.Keys))
	for i, k := range c.Keys {
		if tiers[i], err = tierOfKey(q, k); err != nil {
			return Settled{}, err
		}
		if quota := tiers[i].Limit.Quota(); c.Cost > quota {
			return Settled{}, fmt.Errorf("%w: cost %d: tier key %.60q's limit never grants more than %d", ErrBadSettle, c.Cost, k, quota)
		}
	}
	if err := bucket.CheckRequest(tiers, c.Cost); err != nil {
		return Settled{}, fmt.Errorf("%w: %w", ErrBadSettle, err)
	}
	s := Settled{Queue: q.Name, Delta: actual - c.Cost}
	if s.Delta == 0 {
		return s, nil
	}
	first, err := a.settles.first(ctx, c.Route, jobID)
	if err != nil {
		return Settled{}, err
	}
	if !first {
		return Settled{Queue: q.Name}, nil
	}
	d := bucket.Rebind(store, q.Name, tiers, c.Cost, c.At)
	copy(d.TierAt[:], c.TierAt)
	if err := d.Settle(ctx, actual); err != nil {
		return Settled{}, fmt.Errorf("admit: settling job %s: %w", jobID, err)
	}
	return s, nil
}

// settleStore is the store that decided the jobs of route: the shared one,
// or this admitter's memory store.
func (a *Admitter) settleStore(route string) (bucket.Store, error) {
	f := a.o.Store
	if route == SettleShared {
		if f.primary == nil {
			return nil, fmt.Errorf("%w: route %s: this admitter has no shared store", ErrBadSettle, route)
		}
		return f.primary, nil
	}
	if route != a.o.InstanceID || a.o.InstanceID == "" {
		return nil, fmt.Errorf("%w: route %.40q is not this admitter's", ErrBadSettle, route)
	}
	_, local := f.state()
	if local == nil {
		return nil, fmt.Errorf("%w: route %s: this admitter has no memory store", ErrBadSettle, route)
	}
	return local, nil
}

// settleOnce remembers which jobs were settled: the shared route's in a
// JetStream KV bucket every admitter sees (a create is atomic), this
// admitter's own in a bounded set in memory (only it settles them).
type settleOnce struct {
	kv jetstream.KeyValue // nil: memory only

	mu   sync.Mutex
	seen map[string]struct{}
	ring []string
	next int
}

// settleOnceMax bounds the settled jobs an admitter remembers in memory.
const settleOnceMax = 1 << 16

// first reports whether job id of route is settled for the first time,
// and records it.
func (o *settleOnce) first(ctx context.Context, route, id string) (bool, error) {
	if route == SettleShared && o.kv != nil {
		_, err := o.kv.Create(ctx, "settled."+id, nil)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, jetstream.ErrKeyExists):
			return false, nil
		}
		return false, fmt.Errorf("admit: recording job %s's settle: %w", id, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[id]; ok {
		return false, nil
	}
	if o.seen == nil {
		o.seen = make(map[string]struct{})
		o.ring = make([]string, settleOnceMax)
	}
	if old := o.ring[o.next]; old != "" {
		delete(o.seen, old)
	}
	o.ring[o.next], o.next = id, (o.next+1)%settleOnceMax
	o.seen[id] = struct{}{}
	return true, nil
}
