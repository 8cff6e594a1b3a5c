package jobstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Bucket names the job records' buckets: a job's record is in
// spillway-jobs-NN, NN its id's shard (BucketOf).
const Bucket = "spillway-jobs"

// BucketOf is the bucket that holds job id's record.
func BucketOf(id string) string { return queue.ShardBucket(Bucket, queue.ShardOf(id)) }

// DefaultTTL is how long a record is kept after its last write when Open
// is given 0 (config.DefaultStatusTTL).
const DefaultTTL = 24 * time.Hour

// maxValueSize bounds one record in the bucket: a record is a few hundred
// bytes, and at most about 1.5 KiB with a full LastError.
const maxValueSize = 8 << 10

var (
	// ErrNotFound: there is no record of the job — it never existed, or its
	// record expired.
	ErrNotFound = errors.New("jobstatus: job not found")
	// ErrExists: Create found a record of the job already.
	ErrExists = errors.New("jobstatus: job record exists")
	// ErrInvalidID: the id is not a job id (ValidateID).
	ErrInvalidID = errors.New("jobstatus: invalid job id")
	// ErrInvalidConfig is wrapped by Open's error for a TTL or replica
	// count that cannot be used.
	ErrInvalidConfig = errors.New("jobstatus: invalid config")
)

// Store reads and writes job records. It is safe for concurrent use.
type Store struct {
	shards [queue.KVShards]jetstream.KeyValue
}

// kv is the bucket of job id's record.
func (s *Store) kv(id string) jetstream.KeyValue { return s.shards[queue.ShardOf(id)] }

// Open creates the bucket, or updates it to ttl and replicas: records
// expire ttl after their last write (0: DefaultTTL; JetStream's expiry runs
// about once a second, so it is not exact below that), replicated replicas
// times (0: 1). It is idempotent and safe for several processes at once.
func Open(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (*Store, error) {
	switch {
	case ttl < 0:
		return nil, fmt.Errorf("%w: ttl %v: must not be negative", ErrInvalidConfig, ttl)
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < time.Second:
		return nil, fmt.Errorf("%w: ttl %v: must be at least 1s", ErrInvalidConfig, ttl)
	}
	replicas, err := pace.KVReplicas(replicas)
	if err != nil {
		return nil, fmt.Errorf("%w: replicas %d: want 1 to 5", ErrInvalidConfig, replicas)
	}
	s := &Store{}
	for i := range s.shards {
		name := queue.ShardBucket(Bucket, i)
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:       name,
			Description:  "Spillway job status records",
			History:      1,
			TTL:          ttl,
			Storage:      jetstream.FileStorage,
			Replicas:     replicas,
			MaxValueSize: maxValueSize,
		})
		if err != nil {
			return nil, fmt.Errorf("jobstatus: bucket %s: %w", name, err)
		}
		s.shards[i] = kv
	}
	return s, nil
}

// OpenExisting opens the buckets as they are, changing nothing, or returns
// nil without error when there are none (the admitter keeps no job status).
func OpenExisting(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	s := &Store{}
	for i := range s.shards {
		name := queue.ShardBucket(Bucket, i)
		kv, err := js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			if i == 0 {
				return nil, nil
			}
			return nil, fmt.Errorf("jobstatus: bucket %s is missing: an admitter creates every job status bucket at start", name)
		}
		if err != nil {
			return nil, fmt.Errorf("jobstatus: bucket %s: %w", name, err)
		}
		s.shards[i] = kv
	}
	return s, nil
}

// Get returns the record of job id: ErrNotFound when there is none,
// ErrInvalidID when id is not a job id.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	if err := ValidateID(id); err != nil {
		return Record{}, err
	}
	rec, _, err := s.getAny(ctx, id)
	if err == nil && rec.State != spillway.StateQueued || err != nil && !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	// Queued, or no record: a start or a cancel may have claimed it.
	claim, _, cerr := getIn(ctx, s.kv(id), claimKey(id))
	switch {
	case errors.Is(cerr, ErrNotFound):
		return rec, err
	case cerr != nil:
		return Record{}, cerr
	case err != nil:
		claim.ID = id
		return claim, nil
	}
	return withClaim(rec, claim), nil
}

// get reads job id's record and its revision in the job's bucket.
func (s *Store) get(ctx context.Context, id string) (Record, uint64, error) {
	return getIn(ctx, s.kv(id), id)
}

// getAny is get, falling back for a job that has no record of its own to
// its group record (the first record of a batch's job, group.go), whose
// revision is 0: a conditional write at revision 0 creates the job's own
// record.
func (s *Store) getAny(ctx context.Context, id string) (Record, uint64, error) {
	rec, rev, err := s.get(ctx, id)
	if !errors.Is(err, ErrNotFound) {
		return rec, rev, err
	}
	rec, err = s.getFirst(ctx, id)
	return rec, 0, err
}

func getIn(ctx context.Context, kv jetstream.KeyValue, id string) (Record, uint64, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("jobstatus: reading job %s: %w", id, err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, e.Revision(), fmt.Errorf("jobstatus: job %s: record revision %d: %w", id, e.Revision(), err)
	}
	return rec, e.Revision(), nil
}

// Create stores a job's first record — the admitter's admitted or queued —
// and returns ErrExists if the job has one already: a worker that started
// the job before the admitter's write landed is not overwritten. A zero
// UpdatedAt is set to now.
func (s *Store) Create(ctx context.Context, rec Record) error {
	rec, data, err := encode(rec)
	if err != nil {
		return err
	}
	_, err = s.kv(rec.ID).Create(ctx, rec.ID, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: %s", ErrExists, rec.ID)
	}
	if err != nil {
		return fmt.Errorf("jobstatus: writing job %s: %w", rec.ID, err)
	}
	return nil
}

// CreateMsg is the message Create would publish, for a writer that
// publishes many first records asynchronously (FirstWriter): a JetStream
// publish to the bucket's subject for the job that the server refuses if the
// job has a record already (expected last subject sequence 0), so a worker
// that started the job first is not overwritten. A zero UpdatedAt is set to
// now.
func CreateMsg(rec Record) (*nats.Msg, error) {
	rec, data, err := encode(rec)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg("$KV." + BucketOf(rec.ID) + "." + rec.ID)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Data = data
	return m, nil
}

// Put stores rec as it is, over whatever was there, without reading it:
// for a tool that resets a record (a dead-letter replay), and for the
// Recorder's final record of a job that took one try, which nothing can be
// further along than. A zero UpdatedAt is set to now.
func (s *Store) Put(ctx context.Context, rec Record) error {
	rec, data, err := encode(rec)
	if err != nil {
		return err
	}
	if _, err := s.kv(rec.ID).Put(ctx, rec.ID, data); err != nil {
		return fmt.Errorf("jobstatus: writing job %s: %w", rec.ID, err)
	}
	return nil
}

// Advance merges update into the stored record and returns what is stored
// afterwards. An update that is behind the stored record — fewer attempts,
// or the same attempt at an earlier step (queued/admitted, then running,
// then retrying, then succeeded or dead) — changes nothing (false). An
// update that is applied keeps the stored values of the fields it leaves
// zero (the enqueue time, the last error), except FinishedAt. A zero
// UpdatedAt is set to now.
//
// The write is conditional on the revision that was read, so two writers
// of one record cannot lose each other's update: the loser reads again and
// merges again. Each round it loses is another writer's progress, and a
// record only advances a few times per try, so this ends; ctx bounds it
// all the same.
func (s *Store) Advance(ctx context.Context, update Record) (Record, bool, error) {
	update, data, err := encode(update)
	if err != nil {
		return Record{}, false, err
	}
	for {
		cur, rev, err := s.getAny(ctx, update.ID)
		kv := s.kv(update.ID)
		if errors.Is(err, ErrNotFound) || errors.Is(err, errGroupRead) {
			// No record (or its group's cannot be read, which the job's
			// own record would take precedence over anyway): this one is
			// the first, unless another writer's came meanwhile.
			_, err := kv.Create(ctx, update.ID, data)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another writer created it first: merge with theirs
			}
			if err != nil {
				return Record{}, false, fmt.Errorf("jobstatus: writing job %s: %w", update.ID, err)
			}
			return update, true, nil
		}
		if err != nil && rev == 0 {
			return Record{}, false, err
		}
		// A record that does not decode is replaced (cur is zero).
		out, ok := merge(cur, update)
		if !ok {
			return cur, false, nil
		}
		_, merged, err := encode(out)
		if err != nil {
			return Record{}, false, err
		}
		err = writeAt(ctx, kv, update.ID, merged, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return Record{}, false, fmt.Errorf("jobstatus: writing job %s: %w", update.ID, err)
		}
		return out, true, nil
	}
}

// writeAt writes data as job id's record in kv if its revision is still
// rev, the one read: jetstream.ErrKeyRevisionMismatch if it is not. Rev 0
// (the record read was its group's: the job has none of its own) creates
// the job's record, over a deleted one too.
func writeAt(ctx context.Context, kv jetstream.KeyValue, id string, data []byte, rev uint64) error {
	if rev != 0 {
		_, err := kv.Update(ctx, id, data, rev)
		return err
	}
	_, err := kv.Create(ctx, id, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return err
}

// encode validates and normalizes rec and returns it with its JSON.
func encode(rec Record) (Record, []byte, error) {
	if err := rec.validate(); err != nil {
		return Record{}, nil, err
	}
	if rec.UpdatedAt.IsZero() {
		rec.UpdatedAt = time.Now()
	}
	rec = rec.normalized()
	data, err := marshal(rec)
	if err != nil {
		return Record{}, nil, fmt.Errorf("jobstatus: job %s: %w", rec.ID, err)
	}
	return rec, data, nil
}
