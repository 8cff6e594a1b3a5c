package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// debounceConfig has a queue whose jobs are keyed by X-Client and never
// limited, with a short backlog.max_delay; another queue alike; and one
// whose backlog holds one job per key:
// fmt.Sprintf(debounceConfig, natsURL, redisAddr, webhookURL).
const debounceConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 1s}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 8, grace_period: 5s}
queues:
  - name: deb
    limits:
      - {name: per-client, key: "header:X-Client", algorithm: token_bucket, rate: 1000/s, burst: 1000}
    backlog: {capacity: 1000, leak_rate: 50/s, max_delay: 5s}
    handler: {http: {url: "%[3]s/deb", timeout: 30s}}
  - name: other
    limits:
      - {name: per-client, key: "header:X-Client", algorithm: token_bucket, rate: 1000/s, burst: 1000}
    backlog: {capacity: 1000, leak_rate: 50/s, max_delay: 5s}
    handler: {http: {url: "%[3]s/other", timeout: 5s}}
  - name: tight
    limits:
      - {name: per-client, key: "header:X-Client", algorithm: token_bucket, rate: 1000/s, burst: 1000}
    backlog: {capacity: 1000, per_key_capacity: 1, leak_rate: 50/s, max_delay: 5s}
    handler: {http: {url: "%[3]s/tight", timeout: 5s}}
`

// TestDebounce runs two admitters and a worker as processes. Jobs with
// Spillway-Debounce wait their debounce; a newer job of the same queue
// and debounce key supersedes the waiting one, which ends superseded
// (both status reads say so), leaves every stream and never reaches the
// handler; only the newest runs, about its debounce after its
// submission.
func TestDebounce(t *testing.T) {
	c := afCluster(t, 2, 1, debounceConfig)
	client, nc := afClients(t, c)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	backlogPullers(t, c.nats.URL(), c.config, "deb", 1)
	adm := func(i int) string { return c.admitters[i%len(c.admitters)].addr }
	submit := func(i int, q string, h map[string]string) answer {
		t.Helper()
		a := submitHTTP(t, client, adm(i), q, h, []byte(`{}`))
		if a.Reply.Status != spillway.Queued {
			t.Fatalf("a debounced job of %s: %d %+v, want queued", q, a.Code, a.Reply)
		}
		return a
	}
	hitsOf := func(ids ...string) map[string]int {
		n := c.hook.countByID()
		out := map[string]int{}
		for _, id := range ids {
			if n[id] > 0 {
				out[id] = n[id]
			}
		}
		return out
	}

	t.Run("only the newest runs", func(t *testing.T) {
		var ids []string
		var last time.Time
		for i := range 5 {
			if i > 0 {
				time.Sleep(200 * time.Millisecond) // the spacing under test
			}
			last = time.Now()
			a := submit(i, "deb", map[string]string{"X-Client": "solo", spillway.HeaderDebounce: "1s"})
			ids = append(ids, a.Reply.ID)
		}
		newest := ids[len(ids)-1]
		waitFor(t, 10*time.Second, "the newest job's handler call", func() bool { return hitsOf(newest)[newest] > 0 })
		for i, id := range ids[:len(ids)-1] {
			waitSuperseded(t, client, adm(0), nc, id, ids[i+1])
		}
		hits := c.hook.snapshot()
		if got := hitsOf(ids...); len(got) != 1 || got[newest] != 1 {
			t.Errorf("handler calls by job: %v, want one, for the newest job %s", got, newest)
		}
		for _, h := range hits {
			if h.ID == newest {
				if after := h.At.Sub(last); after < 900*time.Millisecond || after > 2500*time.Millisecond {
					t.Errorf("the newest job ran %v after its submission, want 0.9 s to 2.5 s (debounce 1s)", after)
				}
				t.Logf("the newest of 5 jobs 200 ms apart, debounce 1s, ran %v after its submission", h.At.Sub(last).Round(time.Millisecond))
			}
		}
		waitStatus(t, client, adm(1), newest, spillway.StateSucceeded)
		notInStreams(t, js, "deb", ids[:len(ids)-1])
	})

	t.Run("debounce keys kept apart, other queues unaffected", func(t *testing.T) {
		// Two clients' jobs interleaved, each group with its own
		// explicit debounce key on one client, the limit key on the
		// other; a job of another queue keyed alike, over NATS.
		var a, b []string
		for i := range 3 {
			x := submit(i, "deb", map[string]string{"X-Client": "pair", spillway.HeaderDebounce: "1s", spillway.HeaderDebounceKey: "left"})
			y := submit(i+1, "deb", map[string]string{"X-Client": "pair", spillway.HeaderDebounce: "1s", spillway.HeaderDebounceKey: "right"})
			a, b = append(a, x.Reply.ID), append(b, y.Reply.ID)
		}
		o := submitNATS(t, nc, "other", map[string]string{"X-Client": "pair", spillway.HeaderDebounce: "500ms", spillway.HeaderDebounceKey: "left"}, []byte(`{}`))
		if o.Reply.Status != spillway.Queued {
			t.Fatalf("a debounced job of queue other over NATS: %+v, want queued", o.Reply)
		}
		plain := submit(0, "other", map[string]string{"X-Client": "pair", spillway.HeaderDelay: "100ms"})
		all := append(append(append([]string{}, a...), b...), o.Reply.ID, plain.Reply.ID)
		want := []string{a[2], b[2], o.Reply.ID, plain.Reply.ID}
		waitFor(t, 10*time.Second, "the newest job of each group and the other queue's jobs run", func() bool { return len(hitsOf(want...)) == len(want) })
		for i := range 2 {
			waitSuperseded(t, client, adm(i), nc, a[i], a[i+1])
			waitSuperseded(t, client, adm(i), nc, b[i], b[i+1])
		}
		if got := hitsOf(all...); len(got) != len(want) {
			t.Errorf("handler calls by job: %v, want one each for %v", got, want)
		}
		notInStreams(t, js, "deb", append(a[:2:2], b[:2]...))
	})

	t.Run("a job that started is not superseded", func(t *testing.T) {
		started, release := make(chan string, 4), make(chan struct{})
		c.hook.mu.Lock()
		c.hook.respond = func(r *http.Request, h hit) int {
			if h.Path == "/deb" && h.Key == "late" {
				started <- h.ID
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			return http.StatusOK
		}
		c.hook.mu.Unlock()
		t.Cleanup(func() {
			c.hook.mu.Lock()
			c.hook.respond = nil
			c.hook.mu.Unlock()
		})
		first := submit(0, "deb", map[string]string{"X-Client": "late", spillway.HeaderDebounce: "200ms"})
		select {
		case id := <-started:
			if id != first.Reply.ID {
				t.Fatalf("job %s started, want %s", id, first.Reply.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the first job did not start within 10 s")
		}
		second := submit(1, "deb", map[string]string{"X-Client": "late", spillway.HeaderDebounce: "200ms"})
		close(release)
		waitStatus(t, client, adm(0), first.Reply.ID, spillway.StateSucceeded)
		waitStatus(t, client, adm(1), second.Reply.ID, spillway.StateSucceeded)
		if got := hitsOf(first.Reply.ID, second.Reply.ID); len(got) != 2 {
			t.Errorf("handler calls by job: %v, want the running job and the newer one once each", got)
		}
	})

	t.Run("a newer job the backlog refuses supersedes nothing", func(t *testing.T) {
		first := submit(0, "tight", map[string]string{"X-Client": "full", spillway.HeaderDebounce: "1s"})
		refused := submitHTTP(t, client, adm(1), "tight", map[string]string{"X-Client": "full", spillway.HeaderDebounce: "1s"}, []byte(`{}`))
		if refused.Code != http.StatusTooManyRequests || refused.Reply.Type != spillway.ProblemKeyFull {
			t.Fatalf("a second debounced job of a key whose one backlog place is taken: %d %+v, want 429 key-full", refused.Code, refused.Reply)
		}
		waitStatus(t, client, adm(0), first.Reply.ID, spillway.StateSucceeded)
		if got := hitsOf(first.Reply.ID); got[first.Reply.ID] != 1 {
			t.Errorf("the first job ran %d times, want once", got[first.Reply.ID])
		}
	})

	t.Run("racing admitters", func(t *testing.T) {
		// Ten jobs of one group at once, through both admitters: the
		// group's entry is written with compare-and-set, so one runs and
		// the nine others end superseded, whichever admitter wrote last.
		ids := make([]string, 10)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() {
				a := submitHTTP(t, client, adm(i), "deb", map[string]string{"X-Client": "race", spillway.HeaderDebounce: "1s"}, []byte(`{}`))
				ids[i] = a.Reply.ID
			})
		}
		wg.Wait()
		states := map[spillway.State]int{}
		waitFor(t, 15*time.Second, "every racing job succeeded or superseded", func() bool {
			clear(states)
			for _, id := range ids {
				states[stateOf(client, adm(0), id)]++
			}
			return states[spillway.StateSucceeded]+states[spillway.StateSuperseded] == len(ids)
		})
		if states[spillway.StateSucceeded] != 1 || states[spillway.StateSuperseded] != 9 {
			t.Errorf("racing jobs by state: %v, want 1 succeeded and 9 superseded", states)
		}
		if got := hitsOf(ids...); len(got) != 1 {
			t.Errorf("handler calls by job: %v, want one job once", got)
		}
		var gone []string
		for _, id := range ids {
			if stateOf(client, adm(1), id) == spillway.StateSuperseded {
				gone = append(gone, id)
			}
		}
		notInStreams(t, js, "deb", gone)
	})

	t.Run("bad headers", func(t *testing.T) {
		for _, tc := range []struct {
			h     map[string]string
			field string
			says  string
		}{
			{map[string]string{spillway.HeaderDebounce: "soon"}, spillway.HeaderDebounce, "want a duration > 0"},
			{map[string]string{spillway.HeaderDebounce: "0s"}, spillway.HeaderDebounce, "want a duration > 0"},
			{map[string]string{spillway.HeaderDebounce: "-1s"}, spillway.HeaderDebounce, "want a duration > 0"},
			{map[string]string{spillway.HeaderDebounce: "1s", spillway.HeaderDelay: "1s"}, spillway.HeaderDebounce, "not both"},
			{map[string]string{spillway.HeaderDebounceKey: "k"}, spillway.HeaderDebounceKey, "send it with " + spillway.HeaderDebounce},
			{map[string]string{spillway.HeaderDebounce: "2s", spillway.HeaderMaxWait: "1s"}, spillway.HeaderMaxWait, "could never start in time"},
			{map[string]string{spillway.HeaderDebounce: "6s"}, spillway.HeaderDebounce, "backlog.max_delay, 5s"},
			{map[string]string{spillway.HeaderDebounce: "1s", spillway.HeaderDebounceKey: strings.Repeat("k", 1025)}, spillway.HeaderDebounceKey, "want at most 1024"},
		} {
			tc.h["X-Client"] = "bad"
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+adm(0)+"/v1/queues/deb/jobs", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.h {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var p spillway.Problem
			err = json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusBadRequest || p.Type != spillway.ProblemBadRequest || p.Field != tc.field || !strings.Contains(p.Detail, tc.says) {
				t.Errorf("HTTP %v: %d %+v (%v), want 400 bad-request naming %s, saying %q", tc.h, resp.StatusCode, p, err, tc.field, tc.says)
			}
			n := submitNATS(t, nc, "deb", tc.h, []byte(`{}`))
			if n.Reply.Status != spillway.Failed || n.Reply.Type != spillway.ProblemBadRequest || !strings.Contains(n.Reply.Error, tc.field) {
				t.Errorf("NATS %v: %+v, want error bad-request naming %s", tc.h, n.Reply, tc.field)
			}
		}
	})

	var superseded float64
	for _, a := range c.admitters {
		superseded += afScrape(t, client, a.addr)[`spillway_jobs_superseded_total{queue="deb"}`]
	}
	if superseded != 17 {
		t.Errorf("spillway_jobs_superseded_total{queue=\"deb\"} over the admitters: %v, want 17 (4 + 2 + 2 + 9)", superseded)
	}
}

// waitSuperseded waits until job id reads superseded by the job by, over
// HTTP from the admitter at addr and over NATS.
func waitSuperseded(t *testing.T, client *http.Client, addr string, nc *nats.Conn, id, by string) {
	t.Helper()
	rec := waitStatus(t, client, addr, id, spillway.StateSuperseded)
	if rec.SupersededBy != by || rec.FinishedAt.IsZero() {
		t.Errorf("job %s over HTTP: %+v, want superseded by %s, with finished_at", id, rec, by)
	}
	m, err := nc.Request(spillway.JobPrefix+id, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("reading job %s over NATS: %v", id, err)
	}
	var job spillway.Job
	if err := json.Unmarshal(m.Data, &job); err != nil || job.State != spillway.StateSuperseded || job.SupersededBy != by ||
		m.Header.Get(spillway.HeaderStatus) != string(spillway.StateSuperseded) {
		t.Errorf("job %s over NATS: %s %s (%v), want superseded by %s", id, m.Header.Get(spillway.HeaderStatus), m.Data, err, by)
	}
}

// waitStatus waits up to 10 s until GET /v1/jobs/{id} says state, and
// returns the record.
func waitStatus(t *testing.T, client *http.Client, addr, id string, state spillway.State) spillway.Job {
	t.Helper()
	var job spillway.Job
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := get(client, "http://"+addr+"/v1/jobs/"+id)
		if err == nil {
			job = spillway.Job{}
			if resp.StatusCode == http.StatusOK {
				err = json.NewDecoder(resp.Body).Decode(&job)
			}
			last = resp.Status + " " + string(job.State)
			resp.Body.Close()
			if err == nil && job.State == state {
				return job
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %s (%v) after 10 s, want %s", id, last, err, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stateOf is job id's state as GET /v1/jobs/{id} says it ("" when it
// cannot be read).
func stateOf(client *http.Client, addr, id string) spillway.State {
	resp, err := get(client, "http://"+addr+"/v1/jobs/"+id)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var job spillway.Job
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&job) != nil {
		return ""
	}
	return job.State
}

// notInStreams fails the test for each job of ids that is still a
// message of q's READY, backlog or dead-letter stream.
func notInStreams(t *testing.T, js jetstream.JetStream, q string, ids []string) {
	t.Helper()
	ctx := context.Background()
	gone := map[string]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	for _, kind := range []queue.Destination{queue.Ready, queue.Backlog, queue.Dead} {
		s, err := js.Stream(ctx, queue.StreamName(q, kind))
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if id := m.Header.Get(spillway.HeaderJobID); gone[id] {
				t.Errorf("superseded job %s is still in %s at %d", id, queue.StreamName(q, kind), seq)
			}
		}
	}
}
