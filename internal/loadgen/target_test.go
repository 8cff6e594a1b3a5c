package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// fakeAdmitter answers by client key: a admitted, b queued, c rejected
// (queue full), d a 503; it records the keys and the Authorization seen.
type fakeAdmitter struct {
	mu    sync.Mutex
	keys  map[string]int
	auth  map[string]int
	inFly int
	hi    int
}

func (f *fakeAdmitter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.keys[r.Header.Get("X-Api-Key")]++
	f.auth[r.Header.Get("Authorization")]++
	f.inFly++
	f.hi = max(f.hi, f.inFly)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inFly--; f.mu.Unlock() }()
	time.Sleep(time.Millisecond)
	if r.URL.Path != "/v1/queues/demo/jobs" || r.Method != http.MethodPost {
		http.Error(w, "wrong path "+r.URL.Path, http.StatusNotFound)
		return
	}
	problem := func(status int, typ string) {
		w.Header().Set("Content-Type", spillway.ProblemContentType)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(spillway.Problem{Type: typ, Title: "no", Status: status, RetryAfterMS: 1500})
	}
	switch r.Header.Get("X-Api-Key") {
	case "a", "b":
		st := spillway.Admitted
		if r.Header.Get("X-Api-Key") == "b" {
			st = spillway.Queued
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(spillway.SubmitReply{ID: "x", Queue: "demo", Status: st})
	case "c":
		problem(http.StatusTooManyRequests, spillway.ProblemQueueFull)
	default:
		problem(http.StatusServiceUnavailable, spillway.ProblemUnavailable)
	}
}

// The engine against a real HTTP server: every answer counted under its
// verdict and reason, keys round-robin, headers sent, callers bounded.
func TestHTTPTarget(t *testing.T) {
	t.Parallel()
	fa := &fakeAdmitter{keys: map[string]int{}, auth: map[string]int{}}
	srv := httptest.NewServer(fa)
	t.Cleanup(srv.Close)
	cl, err := client.NewHTTP(srv.URL, client.WithAPIKey("k"), client.WithTimeout(5*time.Second), client.WithRetries(0, 0), client.WithoutIdempotencyKeys())
	if err != nil {
		t.Fatal(err)
	}
	target := &SubmitTarget{Client: cl, Queue: "demo", KeyHeader: "X-Api-Key", Payload: []byte("hello")}
	rep, err := Run(t.Context(), Config{Target: target, Callers: 8, Count: 400, Keys: []string{"a", "b", "c", "d"}})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Counts
	if c.Admitted != 100 || c.Queued != 100 || c.Rejected != 100 || c.RejectedBy["queue-full"] != 100 ||
		c.Errors != 100 || c.ErrorsBy["http 503 unavailable"] != 100 {
		t.Fatalf("counts %+v", c)
	}
	if fa.keys["a"] != 100 || fa.auth["Bearer k"] != 400 || fa.hi > 8 {
		t.Fatalf("server saw keys %v, auth %v, %d at once", fa.keys, fa.auth, fa.hi)
	}
	if rep.Latency.Count() != 400 || rep.Latency.Min() < int64(time.Millisecond) {
		t.Fatalf("%d latencies, min %v", rep.Latency.Count(), time.Duration(rep.Latency.Min()))
	}

	// Nobody listening.
	srv.Close()
	rep, err = Run(t.Context(), Config{Target: target, Callers: 2, Count: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.ErrorsBy["connection refused"] != 10 {
		t.Fatalf("against a closed server: %+v", rep.Counts)
	}
}

// The engine against a real NATS server and a responder written here:
// replies by key, as the admitter's NATS door does.
func TestNATSTarget(t *testing.T) {
	t.Parallel()
	ns := queuetest.Start(t)
	nc := ns.Connect(t)
	var mu sync.Mutex
	costs := map[string]int{}
	sub, err := nc.QueueSubscribe(spillway.SubmitPrefix+"demo", door.AdmitterGroup, func(m *nats.Msg) {
		mu.Lock()
		costs[m.Header.Get(spillway.HeaderCost)]++
		mu.Unlock()
		r := nats.NewMsg(m.Reply)
		rep := spillway.SubmitReply{ID: "x", Queue: "demo"}
		switch m.Header.Get("X-Tenant") {
		case "a":
			rep.Status = spillway.Admitted
		case "b":
			rep.Status = spillway.Queued
		case "c":
			rep.Status, rep.Type, rep.RetryAfterMS = spillway.Rejected, spillway.ProblemRateLimited, 200
		default:
			rep.Status, rep.Type, rep.Error = spillway.Failed, spillway.ProblemBadKey, "no key"
		}
		r.Header.Set(spillway.HeaderStatus, string(rep.Status))
		r.Data, _ = json.Marshal(rep)
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil { // the subscription is known to the server
		t.Fatal(err)
	}

	cl, err := client.NewNATS(ns.Connect(t), client.WithTimeout(5*time.Second), client.WithRetries(0, 0), client.WithoutIdempotencyKeys())
	if err != nil {
		t.Fatal(err)
	}
	target := &SubmitTarget{Client: cl, Queue: "demo", KeyHeader: "X-Tenant", Options: []client.SubmitOption{client.WithCost(2)}, Payload: make([]byte, 100)}
	rep, err := Run(t.Context(), Config{
		Target: target, Rate: bucket.Rate{Count: 2000, Per: time.Second}, Count: 400, Keys: []string{"a", "b", "c", "d"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Counts
	if c.Admitted != 100 || c.Queued != 100 || c.RejectedBy["rate-limited"] != 100 || c.ErrorsBy["bad-key"] != 100 {
		t.Fatalf("counts %+v", c)
	}
	if costs["2"] != 400 {
		t.Fatalf("responder saw costs %v", costs)
	}
	// 400 jobs at 2000/s: the last is due at 199.5ms (the upper bound only
	// catches a pacer gone wrong: a loaded CI machine took 2.09 s).
	if rep.Elapsed < 199*time.Millisecond || rep.Elapsed > 30*time.Second {
		t.Fatalf("elapsed %v", rep.Elapsed)
	}

	// No admitter on this queue.
	target.Queue = "nobody"
	rep, err = Run(t.Context(), Config{Target: target, Callers: 2, Count: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.ErrorsBy["no responders"] != 10 {
		t.Fatalf("without a responder: %+v", rep.Counts)
	}
}

// Classify reads the client's answers and errors: verdicts, rejections
// by reason, problems (with their status on the HTTP door) and transport
// failures in a word or two.
func TestClassify(t *testing.T) {
	t.Parallel()
	problem := func(status int, typ string) error { return &client.ProblemError{Status: status, Type: typ} }
	for i, c := range []struct {
		door string
		ans  *client.Answer
		err  error
		want Outcome
	}{
		{"http", &client.Answer{Verdict: spillway.Admitted}, nil, Outcome{Verdict: Admitted}},
		{"nats", &client.Answer{Verdict: spillway.Queued}, nil, Outcome{Verdict: Queued}},
		{"http", &client.Answer{Verdict: spillway.Rejected}, problem(429, spillway.ProblemQueueFull), Outcome{Rejected, "queue-full"}},
		{"nats", &client.Answer{Verdict: spillway.Rejected}, problem(429, spillway.ProblemKeyFull), Outcome{Rejected, "key-full"}},
		{"http", nil, problem(429, ""), Outcome{Rejected, "429"}},
		{"http", nil, problem(401, spillway.ProblemUnauthorized), Outcome{Failed, "http 401 unauthorized"}},
		{"http", nil, problem(502, ""), Outcome{Failed, "http 502"}},
		{"nats", nil, problem(503, spillway.ProblemUnavailable), Outcome{Failed, "unavailable"}},
		{"nats", nil, problem(500, ""), Outcome{Failed, "error"}},
		{"nats", nil, &client.TransportError{Op: "request", Err: nats.ErrNoResponders}, Outcome{Failed, "no responders"}},
		{"nats", nil, &client.TransportError{Op: "request", Err: context.DeadlineExceeded}, Outcome{Failed, "timeout"}},
		{"http", nil, errors.New("client: not a submit reply"), Outcome{Failed, "bad reply"}},
	} {
		if got := Classify(c.door, c.ans, c.err); got != c.want {
			t.Errorf("case %d: %+v, want %+v", i, got, c.want)
		}
	}
}

func ExampleRun() {
	// A closed loop of 4 callers against a target that admits everything.
	target := TargetFunc(func(context.Context, Request) Outcome { return Outcome{Verdict: Admitted} })
	rep, err := Run(context.Background(), Config{Target: target, Callers: 4, Count: 1000})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("admitted", rep.Counts.Admitted, "latencies", rep.Latency.Count())
	// Output: admitted 1000 latencies 1000
}

func TestRoundRobin(t *testing.T) {
	var got [3][]int64
	var mu sync.Mutex
	rr := make(RoundRobin, 3)
	for i := range rr {
		rr[i] = TargetFunc(func(_ context.Context, r Request) Outcome {
			mu.Lock()
			defer mu.Unlock()
			got[i] = append(got[i], r.Seq)
			return Outcome{Verdict: Verdict(i)}
		})
	}
	for seq := range int64(7) {
		if o := rr.Submit(t.Context(), Request{Seq: seq}); o.Verdict != Verdict(seq%3) {
			t.Errorf("job %d: verdict %v, want target %d's", seq, o.Verdict, seq%3)
		}
	}
	want := [3][]int64{{0, 3, 6}, {1, 4}, {2, 5}}
	for i := range got {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("target %d took jobs %v, want %v", i, got[i], want[i])
		}
	}
}
