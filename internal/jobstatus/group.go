package jobstatus

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// A batch's jobs share their first records. The admitter writes a job's
// first record (admitted or queued) and nothing else, and for a batch one
// write per job would be half of what JetStream stores for the batch. So
// the first records of the jobs of one id group (queue.NewJobIDs: up to
// 64 ids that share their first 10 bytes) are kept together, as one group
// record under the key "<id with bytes 10 to 15 zero>.first", in that
// id's bucket: a batch of 1000 jobs is 16 writes, not 1000. An entry of
// the group record names its job by the rest of its id (bytes 10 to 15,
// random for each job), so a group record tells nothing of an id that is
// not in it, and a reader finds a job's entry only with its whole id.
// Every later write of a job (a worker's, a cancel's, a replay's) is its
// own record, which takes precedence: a job's record is its own record if
// it has one, else its entry in its group record.

// groupOf returns the id that names job id's group (its bytes 10 to 15
// zero) and the job's tail in the group (those bytes, in hex). id must be
// a valid job id.
func groupOf(id string) (string, string) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", ""
	}
	tail := hex.EncodeToString(u[10:])
	clear(u[10:])
	return u.String(), tail
}

// groupSuffix ends the key of every group record; a job's own key is its id.
const groupSuffix = ".first"

// groupKey is the key of the group record named by group id g.
func groupKey(g string) string { return g + groupSuffix }

// GroupBucketOf is the bucket of the group record that may hold job id's
// first record (a valid job id).
func GroupBucketOf(id string) string {
	g, _ := groupOf(id)
	return BucketOf(g)
}

// groupRecord is the first records of a group's jobs, compactly: 64
// queued jobs with every field set take about 6 KiB, under maxValueSize.
type groupRecord struct {
	Queue string `json:"queue"`
	// Submitter is every job's: a batch has one submitter.
	Submitter string       `json:"submitter,omitempty"`
	Jobs      []groupEntry `json:"jobs"`
}

// groupEntry is one job's first record in its group record. Times are
// Unix nanoseconds; UpdatedAt is EnqueuedAt, as the admitter writes it.
type groupEntry struct {
	Tail       string         `json:"i"`
	State      spillway.State `json:"s"`
	EnqueuedAt int64          `json:"e"`
	NotBefore  int64          `json:"nb,omitempty"`
	BacklogSeq uint64         `json:"seq,omitempty"`
}

// FirstMsgs are the messages that store recs, the first records of jobs
// that a writer stores many of at once (FirstWriter, after a batch): the
// records of jobs of one group and one queue, admitted or queued and
// updated when they were enqueued, as one group record; any other record
// alone, as CreateMsg makes it. A record that is not valid is an error,
// and nothing is made.
func FirstMsgs(recs []Record) ([]*nats.Msg, error) {
	type group struct {
		id   string
		recs []Record
	}
	var groups []*group
	byID := make(map[string]*group)
	for _, rec := range recs {
		if err := rec.validate(); err != nil {
			return nil, err
		}
		g, _ := groupOf(rec.ID)
		gr := byID[g]
		if gr == nil {
			gr = &group{id: g}
			byID[g] = gr
			groups = append(groups, gr)
		}
		gr.recs = append(gr.recs, rec)
	}
	msgs := make([]*nats.Msg, 0, len(groups))
	for _, g := range groups {
		if m := groupMsg(g.id, g.recs); m != nil {
			msgs = append(msgs, m)
			continue
		}
		for _, rec := range g.recs {
			m, err := CreateMsg(rec)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// groupMsg is the message of group g's record holding recs, or nil when
// they are better written alone: one record, records a group record
// cannot hold, or more than maxValueSize of them.
func groupMsg(g string, recs []Record) *nats.Msg {
	if len(recs) < 2 {
		return nil
	}
	gr := groupRecord{Queue: recs[0].Queue, Submitter: recs[0].Submitter, Jobs: make([]groupEntry, len(recs))}
	for i, rec := range recs {
		rec = rec.normalized()
		if rec.Queue != gr.Queue || rec.Submitter != gr.Submitter || rank(rec.State) != 0 || rec.Attempts != 0 || rec.LastError != "" ||
			!rec.StartedAt.IsZero() || !rec.FinishedAt.IsZero() || !rec.UpdatedAt.Equal(rec.EnqueuedAt) || rec.EnqueuedAt.IsZero() {
			return nil
		}
		_, tail := groupOf(rec.ID)
		gr.Jobs[i] = groupEntry{Tail: tail, State: rec.State, EnqueuedAt: rec.EnqueuedAt.UnixNano(), BacklogSeq: rec.BacklogSeq}
		if !rec.NotBefore.IsZero() {
			gr.Jobs[i].NotBefore = rec.NotBefore.UnixNano()
		}
	}
	data, err := json.Marshal(gr)
	if err != nil || len(data) > maxValueSize {
		return nil
	}
	m := nats.NewMsg("$KV." + BucketOf(g) + "." + groupKey(g))
	// A group is its batch's alone, written once: a second write would
	// replace the entries of the first, so the server refuses it.
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Data = data
	return m
}

// IsGroup reports whether m, made by FirstMsgs, is a group record.
func IsGroup(m *nats.Msg) bool { return strings.HasSuffix(m.Subject, groupSuffix) }

// RecordsIn is how many job records m, made by FirstMsgs, holds.
func RecordsIn(m *nats.Msg) int {
	var gr groupRecord
	if json.Unmarshal(m.Data, &gr) != nil || len(gr.Jobs) == 0 {
		return 1
	}
	return len(gr.Jobs)
}

// GetFirst returns job id's first record from its group record in kv, the
// bucket GroupBucketOf(id) names: ErrNotFound when the group has none, or
// no entry for the job. For a reader of the buckets that is not a Store
// (the Go client).
func GetFirst(ctx context.Context, kv jetstream.KeyValue, id string) (Record, error) {
	g, tail := groupOf(id)
	if g == "" {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	e, err := kv.Get(ctx, groupKey(g))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("jobstatus: reading job %s: %w", id, err)
	}
	var gr groupRecord
	if err := json.Unmarshal(e.Value(), &gr); err != nil {
		// Advisory, as any record: one that cannot be read is none,
		// and the job's next write makes a record of its own.
		return Record{}, fmt.Errorf("%w: %s (its group record %s, revision %d, does not decode: %w)", ErrNotFound, id, groupKey(g), e.Revision(), err)
	}
	for _, j := range gr.Jobs {
		if j.Tail == tail {
			at := time.Unix(0, j.EnqueuedAt).UTC()
			rec := Record{ID: id, Queue: gr.Queue, State: j.State, EnqueuedAt: at, UpdatedAt: at, BacklogSeq: j.BacklogSeq, Submitter: gr.Submitter}
			if j.NotBefore != 0 {
				rec.NotBefore = time.Unix(0, j.NotBefore).UTC()
			}
			return rec, nil
		}
	}
	return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
}

// errGroupRead marks a failure to read a job's group record (not its
// absence): a writer need not know it (Advance).
var errGroupRead = errors.New("jobstatus: reading a group record")

// getFirst is GetFirst in s's buckets.
func (s *Store) getFirst(ctx context.Context, id string) (Record, error) {
	g, _ := groupOf(id)
	rec, err := GetFirst(ctx, s.kv(g), id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Record{}, fmt.Errorf("%w: %w", errGroupRead, err)
	}
	return rec, err
}
