package admit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// IdempotencyBucket names the JetStream KV buckets of idempotency
// records, shared by every admitter: a key's record is in
// spillway-idempotency-NN, NN its shard (IdempotencyBucketOf), so the
// records' writes are spread over as many streams.
const IdempotencyBucket = "spillway-idempotency"

// IdempotencyBucketOf is the bucket of idempotency key key of caller
// caller (Request.Caller) on queue q.
func IdempotencyBucketOf(caller, q, key string) string {
	return queue.ShardBucket(IdempotencyBucket, queue.ShardOf(idemKey(caller, q, key)))
}

// idemKey is the KV key of idempotency key key of caller caller on queue
// q: a key is the caller's own, so two callers' keys never meet.
func idemKey(caller, q, key string) string {
	return "k." + queue.KeyToken(caller+"\x00"+q+"\x00"+key)
}

// ErrIdempotencyMismatch is Claim's error for a key its caller used
// before for another job: the submission's sum differs from the first's.
var ErrIdempotencyMismatch = errors.New("admit: the idempotency key was used for another job")

// Idempotency records the first answer to each idempotency key in a
// JetStream KV bucket, so that a retried submission — through either door,
// to any admitter — gets that answer and takes no second unit or slot.
//
// A key is claimed with an atomic create (one admitter wins); the winner
// decides and stores the job, then records its answer. Others wait for the
// answer. Only admitted and queued answers are kept: a rejected or failed
// submission releases its key, so a retry later is decided afresh.
// A claim whose admitter died before answering is taken over after
// StaleAfter with the same job id, so the job, if it was stored, is
// deduplicated by JetStream rather than stored twice; its units may have
// been taken once more (docs/admission.md).
type Idempotency struct {
	shards     [queue.KVShards]jetstream.KeyValue
	logger     *slog.Logger
	StaleAfter time.Duration // default 10s
	now        func() time.Time
}

// OpenIdempotency creates or updates the buckets; records live for ttl.
func OpenIdempotency(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int, logger *slog.Logger) (*Idempotency, error) {
	if replicas < 1 {
		replicas = 1
	}
	if logger == nil {
		logger = slog.Default()
	}
	i := &Idempotency{logger: logger, StaleAfter: 10 * time.Second, now: time.Now}
	for n := range i.shards {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      queue.ShardBucket(IdempotencyBucket, n),
			Description: "Spillway: the first answer to each idempotency key",
			History:     1,
			TTL:         ttl,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("admit: idempotency bucket: %w", err)
		}
		i.shards[n] = kv
	}
	return i, nil
}

// kv is the bucket of KV key k.
func (i *Idempotency) kv(k string) jetstream.KeyValue { return i.shards[queue.ShardOf(k)] }

type idemRecord struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
	// Sum is the first submission's requestSum: a retry must be the same
	// job.
	Sum   string                `json:"sum"`
	Reply *spillway.SubmitReply `json:"reply,omitempty"` // nil while pending
	// RateLimit is what the first answer said about the limits.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
}

type claim struct {
	key string
	id  string
	sum string
	rev uint64
}

// Claim claims key of caller for queue q, for a submission whose
// requestSum is sum. It returns either a claim (this caller decides, with
// claim.id as the job id: id, or a new one when id is "", for the key's
// first submission; the id of the first otherwise) or the first answer,
// its reply and what it said about the limits. A first submission of
// another sum is ErrIdempotencyMismatch.
func (i *Idempotency) Claim(ctx context.Context, caller, q, key, id, sum string) (*claim, *Answer, error) {
	k := idemKey(caller, q, key)
	kv := i.kv(k)
	wait := 2 * time.Millisecond
	for {
		if id == "" {
			var err error
			if id, err = queue.NewJobID(q); err != nil {
				return nil, nil, err
			}
		}
		b, _ := json.Marshal(idemRecord{ID: id, At: i.now(), Sum: sum})
		rev, err := kv.Create(ctx, k, b)
		if err == nil {
			return &claim{key: k, id: id, sum: sum, rev: rev}, nil, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, nil, err
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, nil, err
		}
		var rec idemRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil, nil, fmt.Errorf("admit: idempotency record %s: %w", k, err)
		}
		if rec.Sum != sum {
			return nil, nil, ErrIdempotencyMismatch
		}
		if rec.Reply != nil {
			return nil, &Answer{Reply: *rec.Reply, RateLimit: rec.RateLimit.after(i.now().Sub(rec.At)), Source: FromPrimary}, nil
		}
		if i.now().Sub(rec.At) > i.StaleAfter {
			b, _ := json.Marshal(idemRecord{ID: rec.ID, At: i.now(), Sum: sum})
			rev, err := kv.Update(ctx, k, b, e.Revision())
			if err == nil {
				return &claim{key: k, id: rec.ID, sum: sum, rev: rev}, nil, nil
			}
			continue // somebody else took it over or answered
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("admit: waiting for the first submission with this idempotency key: %w", ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Settle records the answer of a claim: kept if the job was stored,
// left for a retry to take over with the same id if it may have been
// stored, released otherwise.
func (i *Idempotency) Settle(c *claim, ans Answer, err error) {
	reply := ans.Reply
	// The caller may have gone; the record must still be settled.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err == nil && (reply.Status == spillway.Admitted || reply.Status == spillway.Queued) {
		b, _ := json.Marshal(idemRecord{ID: c.id, At: i.now(), Sum: c.sum, Reply: &reply, RateLimit: ans.RateLimit})
		if _, uerr := i.kv(c.key).Update(ctx, c.key, b, c.rev); uerr != nil {
			i.logger.Warn("admit: recording an idempotent answer", "job", c.id, "err", uerr)
		}
		return
	}
	var e *Error
	if errors.As(err, &e) && e.mayBeStored {
		// The job may be stored under c.id: keep the id, as a claim that
		// is stale at once, so that a retry takes it over and publishes
		// the job again under the same id, which JetStream deduplicates.
		b, _ := json.Marshal(idemRecord{ID: c.id, Sum: c.sum})
		if _, uerr := i.kv(c.key).Update(ctx, c.key, b, c.rev); uerr != nil {
			i.logger.Warn("admit: keeping the id of a job that may be stored", "job", c.id, "err", uerr)
		}
		return
	}
	i.release(c)
}

// release gives claim c's key up, for a retry to claim afresh.
func (i *Idempotency) release(c *claim) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if derr := i.kv(c.key).Delete(ctx, c.key, jetstream.LastRevision(c.rev)); derr != nil {
		i.logger.Warn("admit: releasing an idempotency key", "job", c.id, "err", derr)
	}
}

// requestSum is what makes a submission the job it is, for an
// idempotency key's retries to be compared with its first: a SHA-256 of
// the payload, the cost, the priority, the schedule (Spillway-Not-Before,
// Spillway-Delay, Spillway-Max-Wait) and the value of every header a tier
// of queue q keys on (header:NAME tiers, shadow ones too). The trace
// context is left out (a retry is a new span), and so is the client's
// address (a retry may come from another one).
func requestSum(q *config.Queue, r *Request) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(string(r.Payload))
	field(strconv.FormatInt(max(r.Cost, 1), 10))
	field(r.Priority.String())
	nb := ""
	if !r.Schedule.NotBefore.IsZero() {
		nb = r.Schedule.NotBefore.UTC().Format(time.RFC3339Nano)
	}
	field(nb)
	field(r.Schedule.Delay.String())
	wait := ""
	if r.Schedule.MaxWait != nil {
		wait = r.Schedule.MaxWait.String()
	}
	field(wait)
	for _, l := range q.Limits {
		if l.Key.Kind != config.KeyHeader {
			continue
		}
		v := ""
		if r.Keys != nil {
			v = r.Keys(l.Key.Header)
		}
		field(l.Key.Header)
		field(v)
	}
	if r.Schedule.Debounce > 0 { // only then: the sums of other jobs stay as they were
		field(spillway.HeaderDebounce)
		field(r.Schedule.Debounce.String())
		field(r.DebounceKey)
	}
	return hex.EncodeToString(h.Sum(nil))
}
