package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// kpCall is one call at the key pushback test's downstream.
type kpCall struct {
	At, Answered time.Time
	Key          string
	Seq          int
	Status       int
}

// kpDownstream answers every job of key P 429 with Retry-After: 2 until
// busyUntil, and everything else 200, recording each call.
type kpDownstream struct {
	srv       *httptest.Server
	mu        sync.Mutex
	busyUntil time.Time
	calls     []kpCall
}

func newKPDownstream(t *testing.T) *kpDownstream {
	d := &kpDownstream{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		at := time.Now()
		var body struct {
			Key string `json:"key"`
			Seq int    `json:"seq"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		st := http.StatusOK
		if body.Key == "P" && at.Before(d.busyUntil) {
			st = http.StatusTooManyRequests
			rw.Header().Set("Retry-After", "2")
		}
		rw.WriteHeader(st)
		d.calls = append(d.calls, kpCall{At: at, Answered: time.Now(), Key: body.Key, Seq: body.Seq, Status: st})
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *kpDownstream) snapshot() []kpCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.calls)
	slices.SortFunc(out, func(a, b kpCall) int { return a.At.Compare(b.At) })
	return out
}

// done is the time each job of key finished (200), by its seq.
func kpDone(calls []kpCall, key string) map[int]time.Time {
	ok := map[int]time.Time{}
	for _, c := range calls {
		if c.Key == key && c.Status == http.StatusOK {
			ok[c.Seq] = c.Answered
		}
	}
	return ok
}

// TestKeyPushbackAcrossProcesses: two admitter and two worker processes,
// a queue leaking 20/s with backlog.pushback: key. A burst of 16 jobs of
// each of keys P and Q goes to the backlog; the downstream answers P 429
// with Retry-After: 2 for the first 2 s, Q 200. Only P pauses: Q's 16 jobs
// are done within 2 s of the burst, no P job starts inside a Retry-After
// it was answered, every P job runs, and nothing is dead-lettered.
func TestKeyPushbackAcrossProcesses(t *testing.T) {
	const perKey, retryAfter = 16, 2 * time.Second
	d := newKPDownstream(t)
	r := fdStart(t, 20, "20/s", ", pushback: key", `{max_attempts: 100, initial: 100ms, max: 2s}`, d.srv.URL)
	for _, w := range []string{"0", "1"} {
		r.c.workers = append(r.c.workers, start(t, "worker"+w, bins.worker, "--config", r.c.config, "--metrics-listen", "127.0.0.1:0"))
	}
	backlogPullers(t, r.c.nats.URL(), r.c.config, "fair", 2)

	burst := time.Now()
	d.mu.Lock()
	d.busyUntil = burst.Add(retryAfter)
	d.mu.Unlock()
	r.fill("normal", perKey, "P", "Q")
	burstEnd := time.Now()

	waitFor(t, 60*time.Second, "every P and Q job done", func() bool {
		calls := d.snapshot()
		return len(kpDone(calls, "P")) == perKey && len(kpDone(calls, "Q")) == perKey
	})
	calls := d.snapshot()
	var lastQ time.Time
	for _, at := range kpDone(calls, "Q") {
		if at.After(lastQ) {
			lastQ = at
		}
	}
	figure(t, "pushback: key, leak 20/s: Q's %d jobs done %v after the burst (stored in %v); %d calls in all",
		perKey, lastQ.Sub(burstEnd).Round(time.Millisecond), burstEnd.Sub(burst).Round(time.Millisecond), len(calls))
	if took := lastQ.Sub(burstEnd); took > 2*time.Second {
		t.Errorf("Q's jobs were done %v after the burst, want ≤ 2s: P's pushback held Q back", took)
	}
	pushed := 0
	for _, c := range calls {
		if c.Key != "P" || c.Status != http.StatusTooManyRequests {
			continue
		}
		pushed++
		for _, s := range calls {
			if s.Key == "P" && s.At.After(c.Answered) && s.At.Before(c.Answered.Add(retryAfter)) {
				t.Errorf("P's job %d started %v after a 429 with Retry-After: 2 (job %d)", s.Seq, s.At.Sub(c.Answered).Round(time.Millisecond), c.Seq)
			}
		}
	}
	if pushed == 0 {
		t.Fatal("no P job was answered 429: the test pushed nothing back")
	}
	var dead, pauses float64
	for _, w := range r.c.workers {
		dead += metric(t, w.addr, `spillway_dead_letters_total{queue="fair"}`)
		pauses += metric(t, w.addr, `spillway_key_pushback_pauses_total{queue="fair"}`)
	}
	if dead != 0 {
		t.Errorf("%v jobs dead-lettered, want none", dead)
	}
	if pauses == 0 {
		t.Errorf("spillway_key_pushback_pauses_total is 0 on both workers after %d answers of 429", pushed)
	}
	t.Logf("%d P calls answered 429; %v key pauses begun", pushed, pauses)
}
