package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The reliability suite (docs/reliability.md) is every test
// named TestReliability*. `make test` runs its short version; `make
// reliability` sets SPILLWAY_RELIABILITY=full for the counts the issue
// names (100 kills, ...). Each test keeps two ledgers — every submission's
// answer and every handler execution, by job id — and reconciles them: a
// job answered admitted or queued must have completed or be in the
// dead-letter stream, else it is lost.

// full reports whether the long version of the suite runs.
func full() bool { return os.Getenv("SPILLWAY_RELIABILITY") == "full" }

// scale is short in the default run and long in `make reliability`.
func scale(short, long int) int {
	if full() {
		return long
	}
	return short
}

// figure logs a measured figure for docs/reliability.md, one line each,
// so `go test -v ... | grep 'figure:'` collects them.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("figure: %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

// ledger records every submission's answer.
type ledger struct {
	mu       sync.Mutex
	accepted map[string]answer       // admitted or queued, by job id
	answers  map[spillway.Status]int // every answer by status
	problems map[string]int          // refused answers by problem type (or transport error)
	codes    map[int]int             // HTTP status codes (0: NATS, -1: no answer)
	dupIDs   map[string]int          // accepted ids answered more than once
}

func newLedger() *ledger {
	return &ledger{accepted: map[string]answer{}, answers: map[spillway.Status]int{}, problems: map[string]int{}, codes: map[int]int{}, dupIDs: map[string]int{}}
}

// record adds one answer.
func (l *ledger) record(a answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[a.Reply.Status]++
	l.codes[a.Code]++
	switch a.Reply.Status {
	case spillway.Admitted, spillway.Queued:
		if _, ok := l.accepted[a.Reply.ID]; ok {
			l.dupIDs[a.Reply.ID]++
		}
		l.accepted[a.Reply.ID] = a
	default:
		p := a.Reply.Type
		if p == "" {
			p = a.Reply.Error
		}
		l.problems[p]++
	}
}

// ids is a copy of the accepted job ids.
func (l *ledger) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.accepted))
	for id := range l.accepted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (l *ledger) count(s spillway.Status) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.answers[s]
}

func (l *ledger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("answers %v, HTTP codes %v, refusals %v", l.answers, l.codes, l.problems)
}

// executions is the webhook's view: handler runs by job id, and which
// ended with a 2xx answer.
type executions struct {
	runs      map[string]int
	succeeded map[string]bool
}

func (w *webhook) executions() executions {
	e := executions{runs: map[string]int{}, succeeded: map[string]bool{}}
	for _, h := range w.snapshot() {
		e.runs[h.ID]++
		if h.Status >= 200 && h.Status <= 299 {
			e.succeeded[h.ID] = true
		}
	}
	return e
}

// streamMsgs reads every message of a stream, in order, with the
// stream's state at the start of the read.
func streamMsgs(t *testing.T, natsURL, stream string) ([]*jetstream.RawStreamMsg, jetstream.StreamState) {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Name("e2e-stream-reader"))
	if err != nil {
		t.Fatalf("connecting to %s to read %s: %v", natsURL, stream, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("message %d of %s: %v", seq, stream, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, info.State
}

// deadLetters reads the ids in queue q's dead-letter stream, with how many
// times each is there.
func deadLetters(t *testing.T, natsURL, q string) map[string]int {
	t.Helper()
	msgs, _ := streamMsgs(t, natsURL, queue.StreamName(q, queue.Dead))
	ids := map[string]int{}
	for _, m := range msgs {
		ids[m.Header.Get(spillway.HeaderJobID)]++
	}
	return ids
}

// reconciliation compares the ledgers of one test.
type reconciliation struct {
	Accepted   int // answered admitted or queued
	Completed  int // of those, a handler run answered 2xx
	Dead       int // of those, in the dead-letter stream (and not completed)
	Lost       int // neither: the number that must be 0
	Executions int // handler runs of accepted jobs
	Extra      int // runs beyond one per accepted job
	Unanswered int // jobs that ran but whose submission got no accepted answer
	LostIDs    []string
}

func (r reconciliation) String() string {
	return fmt.Sprintf("%d accepted: %d completed, %d dead-lettered, %d lost; %d executions (%d extra); %d ran without an accepted answer",
		r.Accepted, r.Completed, r.Dead, r.Lost, r.Executions, r.Extra, r.Unanswered)
}

// reconcile compares what was answered with what ran and what died.
func reconcile(l *ledger, e executions, dead map[string]int) reconciliation {
	var r reconciliation
	ids := l.ids()
	accepted := make(map[string]bool, len(ids))
	for _, id := range ids {
		accepted[id] = true
		r.Accepted++
		r.Executions += e.runs[id]
		if e.runs[id] > 1 {
			r.Extra += e.runs[id] - 1
		}
		switch {
		case e.succeeded[id]:
			r.Completed++
		case dead[id] > 0:
			r.Dead++
		default:
			r.Lost++
			if len(r.LostIDs) < 10 {
				r.LostIDs = append(r.LostIDs, id)
			}
		}
	}
	for id := range e.runs {
		if !accepted[id] {
			r.Unanswered++
		}
	}
	return r
}

// settle waits until every accepted job has completed or is dead, or d
// passes, and returns the reconciliation either way.
func settle(t *testing.T, l *ledger, w *webhook, natsURL, q string, d time.Duration) reconciliation {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r := reconcile(l, w.executions(), deadLetters(t, natsURL, q))
		if r.Lost == 0 || time.Now().After(deadline) {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReconcileCountsEveryFate: the ledger comparison the reliability
// suite relies on tells completed, dead, lost, extra and unanswered apart.
func TestReconcileCountsEveryFate(t *testing.T) {
	l := newLedger()
	for _, a := range []answer{
		{Code: 202, Reply: spillway.SubmitReply{ID: "done", Status: spillway.Admitted}},
		{Code: 202, Reply: spillway.SubmitReply{ID: "twice", Status: spillway.Queued}},
		{Code: 202, Reply: spillway.SubmitReply{ID: "dead", Status: spillway.Admitted}},
		{Code: 202, Reply: spillway.SubmitReply{ID: "lost", Status: spillway.Queued}},
		{Code: 429, Reply: spillway.SubmitReply{Status: spillway.Rejected, Type: spillway.ProblemRateLimited}},
	} {
		l.record(a)
	}
	e := executions{
		runs:      map[string]int{"done": 1, "twice": 2, "dead": 3, "stray": 1},
		succeeded: map[string]bool{"done": true, "twice": true, "stray": true},
	}
	got := reconcile(l, e, map[string]int{"dead": 1})
	want := reconciliation{Accepted: 4, Completed: 2, Dead: 1, Lost: 1, Executions: 6, Extra: 3, Unanswered: 1, LostIDs: []string{"lost"}}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(got.LostIDs) != fmt.Sprint(want.LostIDs) {
		t.Errorf("reconcile:\n got %s %v\nwant %s %v", got, got.LostIDs, want, want.LostIDs)
	}
	if l.count(spillway.Rejected) != 1 {
		t.Errorf("rejected answers counted %d, want 1", l.count(spillway.Rejected))
	}
}
