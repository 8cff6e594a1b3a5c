package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The one header rule of every move, move by move: which headers of the
// source survive, which the move sets, and which it drops.
func TestMoveHeaderRule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stamp := now.Format(time.RFC3339Nano)
	later := now.Add(time.Minute).Format(time.RFC3339Nano)
	source := func() nats.Header {
		return nats.Header{
			// JetStream's, of the source message: never copied.
			"Nats-Msg-Id":                         {"the-source-id"},
			"Nats-Expected-Stream":                {"SPILLWAY_q_BACKLOG"},
			"Nats-Expected-Last-Seq":              {"7"},
			"NATS-Expected-Last-Subject-Sequence": {"3"},
			"nats-rollup":                         {"sub"},
			"Nats-TTL":                            {"1s"},
			"Nats-Msg-Size":                       {"12"},
			"Nats-Stream":                         {"SPILLWAY_q_READY"},
			"Nats-Sequence":                       {"9"},
			// The job's: copied.
			spillway.HeaderJobID:     {"job-1"},
			spillway.HeaderQueue:     {"q"},
			spillway.HeaderKey:       {"k"},
			spillway.HeaderCost:      {"2"},
			HeaderEnqueuedAt:         {"2026-01-01T00:00:00Z"},
			spillway.HeaderNotBefore: {"2026-01-01T00:00:01Z"},
			HeaderExpiresAt:          {"2026-01-01T00:00:02Z"},
			spillway.HeaderAttempt:   {"1"},
			"Traceparent":            {"00-abc-def-01"},
			"X-Several":              {"a", "b"},
			// A previous death's: dropped (a move to DEAD sets its own).
			HeaderDeadReason:   {"old reason"},
			HeaderLastError:    {"old error"},
			HeaderDeadAt:       {"2025-01-01T00:00:00Z"},
			HeaderSourceStream: {"SPILLWAY_q_OLD"},
			HeaderSourceSeq:    {"1"},
		}
	}
	subject := subjectOf("q", Backlog, KeyToken("k"))
	backlogJob := func(h nats.Header) Source {
		return Source{Queue: "q", Subject: subject, Stream: "SPILLWAY_q_BACKLOG", Seq: 42, Header: h}
	}
	deadJob := Source{Queue: "q", Subject: subjectOf("q", Dead, KeyToken("k")), Stream: "SPILLWAY_q_DEAD", Seq: 5, Header: source()}
	dead := func(cause error) Move {
		return DeadMove(backlogJob(source()), 3, "attempts exhausted (3 of 3)", cause, now)
	}
	copied := map[string][]string{
		spillway.HeaderJobID: {"job-1"}, spillway.HeaderQueue: {"q"}, spillway.HeaderKey: {"k"}, spillway.HeaderCost: {"2"},
		"Traceparent": {"00-abc-def-01"}, "X-Several": {"a", "b"},
	}
	with := func(set map[string][]string) map[string][]string {
		m := map[string][]string{}
		for k, v := range copied {
			m[k] = v
		}
		for k, v := range set {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name    string
		mv      Move
		subject string
		want    map[string][]string // every header of the copy
	}{
		{
			name: "backlog retry to READY", subject: ReadySubject("q", "job-1"),
			mv: RetryMove(backlogJob(source()), 2, now.Add(time.Minute), Ready),
			want: with(map[string][]string{
				nats.MsgIdHdr: {"SPILLWAY_q_BACKLOG:42"}, spillway.HeaderAttempt: {"2"}, spillway.HeaderNotBefore: {later},
				HeaderEnqueuedAt: {"2026-01-01T00:00:00Z"}, HeaderExpiresAt: {"2026-01-01T00:00:02Z"},
			}),
		},
		{
			name: "to DEAD after a failure", subject: subjectOf("q", Dead, KeyToken("k")),
			mv: dead(errors.New("smtp:\n550")),
			want: with(map[string][]string{
				nats.MsgIdHdr: {"SPILLWAY_q_BACKLOG:42"}, spillway.HeaderAttempt: {"3"}, spillway.HeaderNotBefore: {"2026-01-01T00:00:01Z"},
				HeaderEnqueuedAt: {"2026-01-01T00:00:00Z"}, HeaderExpiresAt: {"2026-01-01T00:00:02Z"}, HeaderDeadReason: {"attempts exhausted (3 of 3)"},
				HeaderLastError: {"smtp: 550"}, HeaderDeadAt: {stamp}, HeaderSourceStream: {"SPILLWAY_q_BACKLOG"}, HeaderSourceSeq: {"42"},
			}),
		},
		{
			name: "to DEAD without an error (expired)", subject: subjectOf("q", Dead, KeyToken("k")),
			mv: dead(nil),
			want: with(map[string][]string{
				nats.MsgIdHdr: {"SPILLWAY_q_BACKLOG:42"}, spillway.HeaderAttempt: {"3"}, spillway.HeaderNotBefore: {"2026-01-01T00:00:01Z"},
				HeaderEnqueuedAt: {"2026-01-01T00:00:00Z"}, HeaderExpiresAt: {"2026-01-01T00:00:02Z"}, HeaderDeadReason: {"attempts exhausted (3 of 3)"},
				HeaderDeadAt: {stamp}, HeaderSourceStream: {"SPILLWAY_q_BACKLOG"}, HeaderSourceSeq: {"42"},
			}),
		},
		{
			name: "replay to the backlog", subject: subjectOf("q", Backlog, KeyToken("k")),
			mv: ReplayMove(deadJob, Backlog, "job-1", now),
			want: with(map[string][]string{
				nats.MsgIdHdr: {"job-1:replay:5"}, spillway.HeaderAttempt: {"0"}, HeaderEnqueuedAt: {stamp},
			}),
		},
		{
			name: "replay to READY", subject: ReadySubject("q", "job-1"),
			mv: ReplayMove(deadJob, Ready, "job-1", now),
			want: with(map[string][]string{
				nats.MsgIdHdr: {"job-1:replay:5"}, spillway.HeaderAttempt: {"0"}, HeaderEnqueuedAt: {stamp},
			}),
		},
		{
			name: "to READY's tail, its key at its max", subject: ReadySubject("q", "job-1"),
			mv: TailMove(Source{Queue: "q", Subject: ReadySubject("q", "job-1"), Stream: "SPILLWAY_q_READY", Seq: 9, Header: source()}, 1, now.Add(time.Minute), 2),
			want: with(map[string][]string{
				nats.MsgIdHdr: {"SPILLWAY_q_READY:9"}, spillway.HeaderAttempt: {"1"}, spillway.HeaderNotBefore: {later},
				HeaderEnqueuedAt: {"2026-01-01T00:00:00Z"}, HeaderExpiresAt: {"2026-01-01T00:00:02Z"}, HeaderKeyMoves: {"2"},
			}),
		},
	} {
		m, err := c.mv.message()
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if m.Subject != c.subject {
			t.Errorf("%s: subject %s, want %s", c.name, m.Subject, c.subject)
		}
		for k, v := range m.Header {
			if w, ok := c.want[k]; !ok || !slices.Equal(v, w) {
				t.Errorf("%s: header %s: %q, want %q", c.name, k, v, w)
			}
		}
		for k, w := range c.want {
			if _, ok := m.Header[k]; !ok {
				t.Errorf("%s: header %s missing, want %q", c.name, k, w)
			}
		}
		for k := range m.Header {
			if strings.HasPrefix(strings.ToLower(k), "nats-") && k != nats.MsgIdHdr {
				t.Errorf("%s: JetStream header %s copied", c.name, k)
			}
		}
	}
	// The source is not changed by the copy.
	h := source()
	mv := RetryMove(Source{Queue: "q", Subject: subject, Stream: "S", Seq: 1, Header: h}, 1, now, Ready)
	m, err := mv.message()
	if err != nil {
		t.Fatal(err)
	}
	m.Header["X-Several"][0] = "changed"
	if h.Get("X-Several") != "a" || h.Get(spillway.HeaderAttempt) != "1" {
		t.Errorf("the copy shares the source's headers: %v", h)
	}
}

// A move files a job under its class in the backlog, and only there
// reads the class: a message whose class cannot be read is refused a
// place in the backlog (nothing stored, the source not settled), and
// still reaches READY or DEAD with its header as it was. Out of READY,
// whose subjects end with the job's id, a job goes under its key's token,
// taken from its key header; into READY, under its id.
func TestMoveClass(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := KeyToken("k")
	src := func(priority string) Source {
		h := nats.Header{spillway.HeaderJobID: {"job-1"}, spillway.HeaderQueue: {"q"}, spillway.HeaderKey: {"k"}}
		if priority != "" {
			h.Set(spillway.HeaderPriority, priority)
		}
		return Source{Queue: "q", Subject: ReadySubject("q", "job-1"), Stream: "SPILLWAY_q_READY", Seq: 7, Header: h}
	}
	for _, c := range []struct {
		name    string
		mv      Move
		subject string // "" : refused
	}{
		{"high, retried to the backlog", RetryMove(src("high"), 1, now, Backlog), "spillway.backlog.q.high." + tok},
		{"low, replayed to the backlog", ReplayMove(src("LOW"), Backlog, "job-1", now), "spillway.backlog.q.low." + tok},
		{"no class, to the backlog", RetryMove(src(""), 1, now, Backlog), "spillway.backlog.q." + tok},
		{"high, to READY", RetryMove(src("high"), 1, now, Ready), "spillway.ready.q.job-1"},
		{"unreadable, to the backlog", RetryMove(src("urgent"), 1, now, Backlog), ""},
		{"unreadable, replayed to the backlog", ReplayMove(src("urgent"), Backlog, "job-1", now), ""},
		{"unreadable, to READY", RetryMove(src("urgent"), 1, now, Ready), "spillway.ready.q.job-1"},
		{"unreadable, to DEAD", DeadMove(src("urgent"), 0, "invalid job", nil, now), "spillway.dead.q." + tok},
	} {
		m, err := c.mv.message()
		if c.subject == "" {
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), spillway.HeaderPriority) {
				t.Errorf("%s: error %v, want ErrInvalidJob naming %s", c.name, err, spillway.HeaderPriority)
			}
			settled := false
			ack, err := c.mv.Do(t.Context(), nil, func(context.Context) error { settled = true; return nil })
			if ack != nil || !errors.Is(err, ErrInvalidJob) || settled {
				t.Errorf("%s: Do: ack %v, error %v, source settled %t; want nothing stored, ErrInvalidJob, the source kept", c.name, ack, err, settled)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if m.Subject != c.subject {
			t.Errorf("%s: subject %s, want %s", c.name, m.Subject, c.subject)
		}
		if got, want := m.Header.Get(spillway.HeaderPriority), c.mv.src.Header.Get(spillway.HeaderPriority); got != want {
			t.Errorf("%s: header %s %q, want the source's %q", c.name, spillway.HeaderPriority, got, want)
		}
	}
}

func TestSubjectBuilder(t *testing.T) {
	t.Parallel()
	tok := KeyToken("k")
	for _, c := range []struct{ got, want string }{
		{ReadySubject("q", "job-1"), "spillway.ready.q.job-1"},
		{Subject("q", Backlog, "k"), "spillway.backlog.q." + tok},
		{Subject("q", Dead, "k"), "spillway.dead.q." + tok},
		{SubjectFilter("q", Backlog), "spillway.backlog.q.>"},
		{SubjectFilter("q", Ready), "spillway.ready.q.*"},
		{classSubject("q", Backlog, spillway.High, tok), "spillway.backlog.q.high." + tok},
		{classSubject("q", Backlog, spillway.Low, tok), "spillway.backlog.q.low." + tok},
		{SubjectToken(ReadySubject("q", "job-1")), "job-1"},
		{SubjectToken(classSubject("q", Backlog, spillway.Low, tok)), tok},
		{GrantSubject("q"), "spillway.grants.q"},
		{Config{Name: "q"}.StreamConfig(Dead).Subjects[0], "spillway.dead.q.*"},
		{Config{Name: "q"}.StreamConfig(Ready).Subjects[0], "spillway.ready.q.*"},
	} {
		if c.got != c.want {
			t.Errorf("%s, want %s", c.got, c.want)
		}
	}
}

// A move into READY files the job under its id, so a message whose id
// cannot be a subject token is refused there (nothing stored, the source
// kept), while it still reaches DEAD.
func TestMoveToReadyNeedsAnID(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, id := range []string{"", "a.b", "a*", "with space"} {
		h := nats.Header{spillway.HeaderQueue: {"q"}, spillway.HeaderKey: {"k"}}
		if id != "" {
			h.Set(spillway.HeaderJobID, id)
		}
		src := Source{Queue: "q", Subject: subjectOf("q", Dead, KeyToken("k")), Stream: "SPILLWAY_q_DEAD", Seq: 3, Header: h}
		settled := false
		ack, err := ReplayMove(src, Ready, "x", now).Do(t.Context(), nil, func(context.Context) error { settled = true; return nil })
		if ack != nil || !errors.Is(err, ErrInvalidJob) || settled {
			t.Errorf("id %q to READY: ack %v, error %v, settled %t; want ErrInvalidJob and the source kept", id, ack, err, settled)
		}
		mv := DeadMove(src, 1, "invalid job", nil, now)
		m, err := mv.message()
		if err != nil || m.Subject != subjectOf("q", Dead, KeyToken("k")) {
			t.Errorf("id %q to DEAD: %v, %v", id, m, err)
		}
	}
}

// A job's move count reads as 0 when absent or not a count.
func TestKeyMoves(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		h    nats.Header
		want int
	}{
		{nil, 0},
		{nats.Header{HeaderKeyMoves: {"3"}}, 3},
		{nats.Header{HeaderKeyMoves: {"-1"}}, 0},
		{nats.Header{HeaderKeyMoves: {"x"}}, 0},
	} {
		if got := KeyMoves(c.h); got != c.want {
			t.Errorf("KeyMoves(%v) = %d, want %d", c.h, got, c.want)
		}
	}
}
