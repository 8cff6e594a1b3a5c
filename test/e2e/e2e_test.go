package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// answer is what one submission got back, whichever door.
type answer struct {
	Code       int // HTTP status; 0 on NATS
	Reply      spillway.SubmitReply
	RetryAfter string
	Admitter   string
}

func submitHTTP(t *testing.T, client *http.Client, addr, q string, header map[string]string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/v1/queues/"+q+"/jobs", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{Code: -1, Reply: spillway.SubmitReply{Status: spillway.Failed, Error: err.Error()}, Admitter: addr}
	}
	defer resp.Body.Close()
	a := answer{Code: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Admitter: addr}
	if resp.StatusCode == http.StatusAccepted {
		decodeJSON(t, resp.Body, &a.Reply)
		return a
	}
	var p spillway.Problem
	decodeJSON(t, resp.Body, &p)
	a.Reply = spillway.SubmitReply{Queue: q, Status: spillway.Failed, Type: p.Type, Error: p.Detail, RetryAfterMS: p.RetryAfterMS}
	if resp.StatusCode == http.StatusTooManyRequests {
		a.Reply.Status = spillway.Rejected
	}
	return a
}

func submitNATS(t *testing.T, nc *nats.Conn, q string, header map[string]string, body []byte) answer {
	t.Helper()
	m := &nats.Msg{Subject: spillway.SubmitPrefix + q, Data: body, Header: nats.Header{}}
	for k, v := range header {
		m.Header.Set(k, v)
	}
	resp, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		return answer{Reply: spillway.SubmitReply{Status: spillway.Failed, Error: err.Error()}}
	}
	var a answer
	if err := json.Unmarshal(resp.Data, &a.Reply); err != nil {
		t.Fatalf("NATS reply %q: %v", resp.Data, err)
	}
	if got := resp.Header.Get(spillway.HeaderStatus); got != string(a.Reply.Status) {
		t.Errorf("NATS reply header %s = %q, body status %q", spillway.HeaderStatus, got, a.Reply.Status)
	}
	return a
}

// cluster is one JetStream, one Redis, two admitters and two workers.
type cluster struct {
	nats      *queuetest.Server
	redis     *redistest.Server
	hook      *webhook
	admitters []*process
	workers   []*process
	config    string
}

const clusterConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 1s}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 32, grace_period: 5s}
queues:
  - name: burst
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 20, delay: 5}
    backlog: {capacity: 1000, per_key_capacity: 100, leak_rate: 100/s}
    handler: {http: {url: "%[3]s/burst", timeout: 5s}}
  - name: tokens
    limits:
      - {key: "header:X-Client", algorithm: token_bucket, rate: 1/s, burst: 10}
    backlog: {capacity: 1000, leak_rate: 10/s}
    handler: {http: {url: "%[3]s/tokens", timeout: 5s}}
  - name: flood
    limits:
      - {key: global, algorithm: leaky_bucket, rate: 100000/s, burst: 100000, nodelay: true}
    backlog: {capacity: 100000, leak_rate: 1000/s}
    handler: {http: {url: "%[3]s/flood", timeout: 5s}}
`

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{nats: queuetest.Start(t), redis: redistest.Start(t, redistest.WithOwnProcess()), hook: newWebhook(t)}
	c.config = writeFile(t, "spillway.yaml", fmt.Sprintf(clusterConfig, c.nats.URL(), c.redis.Addr(), c.hook.srv.URL))
	for i := range 2 {
		c.admitters = append(c.admitters, start(t, "admitter"+strconv.Itoa(i), bins.admitter, "--config", c.config))
	}
	for i := range 2 {
		c.workers = append(c.workers, start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", c.config, "--metrics-listen", "127.0.0.1:0"))
	}
	return c
}

// burst sends n submissions at once through send(i) and returns the answers.
func burst(n int, send func(i int) answer) []answer {
	out := make([]answer, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			out[i] = send(i)
		}()
	}
	close(gate)
	wg.Wait()
	return out
}

func tally(answers []answer) map[spillway.Status]int {
	n := map[spillway.Status]int{}
	for _, a := range answers {
		n[a.Reply.Status]++
	}
	return n
}

// checkBurst checks DESIGN's leaky-bucket example: rate 1/s, burst 20,
// delay 5, 40 jobs at once → 6 admitted, 15 queued, 19 rejected with
// Retry-After, and every accepted job reaches the webhook exactly once,
// no queued job before its not_before.
func checkBurst(t *testing.T, c *cluster, door string, answers []answer) {
	t.Helper()
	n := tally(answers)
	t.Logf("%s burst of %d: %v", door, len(answers), n)
	if n[spillway.Admitted] != 6 || n[spillway.Queued] != 15 || n[spillway.Rejected] != 19 {
		t.Errorf("%s: got %d admitted, %d queued, %d rejected; want 6, 15, 19 (all answers: %v)", door, n[spillway.Admitted], n[spillway.Queued], n[spillway.Rejected], n)
	}
	perAdmitter := map[string]int{}
	for _, a := range answers {
		perAdmitter[a.Admitter]++
		if a.Reply.Status == spillway.Rejected {
			if door == "http" && (a.Code != http.StatusTooManyRequests || a.RetryAfter == "") {
				t.Errorf("rejected over HTTP: status %d, Retry-After %q; want 429 with Retry-After", a.Code, a.RetryAfter)
			}
			if a.Reply.RetryAfterMS <= 0 {
				t.Errorf("rejected without retry_after_ms: %+v", a.Reply)
			}
		}
	}
	if door == "http" && len(perAdmitter) != 2 {
		t.Errorf("answers came from %d admitters, want both: %v", len(perAdmitter), perAdmitter)
	}
	accepted := map[string]answer{}
	for _, a := range answers {
		if a.Reply.Status == spillway.Admitted || a.Reply.Status == spillway.Queued {
			accepted[a.Reply.ID] = a
		}
	}
	waitFor(t, 40*time.Second, door+" burst jobs at the webhook", func() bool {
		counts := c.hook.countByID()
		for id := range accepted {
			if counts[id] == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(500 * time.Millisecond) // a duplicate would arrive about now
	first := map[string]time.Time{}
	counts := map[string]int{}
	for _, h := range c.hook.snapshot() {
		if _, ok := accepted[h.ID]; !ok {
			continue
		}
		counts[h.ID]++
		if _, ok := first[h.ID]; !ok {
			first[h.ID] = h.At
		}
	}
	var early []string
	var latest time.Duration
	for id, a := range accepted {
		if counts[id] != 1 {
			t.Errorf("job %s reached the webhook %d times, want exactly once", id, counts[id])
		}
		if a.Reply.Status == spillway.Queued {
			if a.Reply.NotBefore == nil {
				t.Errorf("queued job %s without not_before", id)
				continue
			}
			if first[id].Before(*a.Reply.NotBefore) {
				early = append(early, fmt.Sprintf("%s started %v before its not_before", id, a.Reply.NotBefore.Sub(first[id])))
			}
			latest = max(latest, first[id].Sub(*a.Reply.NotBefore))
		}
	}
	if len(early) > 0 {
		t.Errorf("%d queued jobs started before their not_before: %v", len(early), early)
	}
	t.Logf("%s: %d accepted jobs each reached the webhook once; queued jobs started at most %v after their not_before", door, len(accepted), latest)
	// The backlog leaks at 100/s, far faster than these jobs come due: each
	// should start at its not_before, not behind a later one of its key.
	if latest > time.Second {
		t.Errorf("%s: a queued job started %v after its not_before", door, latest)
	}
}

func TestSystemHTTPAndNATS(t *testing.T) {
	c := startCluster(t)
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	nc, err := nats.Connect(c.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	// Both doors at once, each with its own client key, so the two
	// bursts share the 16 s the queued jobs take to start.
	var httpAnswers, natsAnswers, tokenAnswers []answer
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		tokenAnswers = burst(110, func(i int) answer {
			return submitHTTP(t, client, c.admitters[i%2].addr, "tokens", map[string]string{"X-Client": "token-client"}, []byte("job "+strconv.Itoa(i)))
		})
	}()
	go func() {
		defer wg.Done()
		httpAnswers = burst(40, func(i int) answer {
			return submitHTTP(t, client, c.admitters[i%2].addr, "burst", map[string]string{"X-Client": "http-client"}, []byte("job "+strconv.Itoa(i)))
		})
	}()
	go func() {
		defer wg.Done()
		natsAnswers = burst(40, func(i int) answer {
			return submitNATS(t, nc, "burst", map[string]string{"X-Client": "nats-client"}, []byte("job "+strconv.Itoa(i)))
		})
	}()
	wg.Wait()

	t.Run("idempotency", func(t *testing.T) {
		// One key retried 5 times, through both doors and both admitters.
		var ids []string
		for i := range 5 {
			h := map[string]string{"X-Client": "idem-client", spillway.HeaderIdempotencyKey: "order-42"}
			var a answer
			if i%2 == 0 {
				a = submitHTTP(t, client, c.admitters[i%2].addr, "burst", h, []byte("order 42"))
			} else {
				a = submitNATS(t, nc, "burst", h, []byte("order 42"))
			}
			if a.Reply.Status != spillway.Admitted {
				t.Fatalf("try %d: %+v, want admitted", i+1, a.Reply)
			}
			if (i > 0) != a.Reply.Duplicate {
				t.Errorf("try %d: duplicate = %v", i+1, a.Reply.Duplicate)
			}
			ids = append(ids, a.Reply.ID)
		}
		for _, id := range ids[1:] {
			if id != ids[0] {
				t.Fatalf("one idempotency key gave several job ids: %v", ids)
			}
		}
		waitFor(t, 10*time.Second, "the idempotent job at the webhook", func() bool { return c.hook.countByID()[ids[0]] >= 1 })
		time.Sleep(500 * time.Millisecond)
		if n := c.hook.countByID()[ids[0]]; n != 1 {
			t.Errorf("the idempotent job reached the webhook %d times, want 1", n)
		}
	})

	t.Run("token bucket backlog drains at the leak rate", func(t *testing.T) { checkLeak(t, c, tokenAnswers, 10) })
	t.Run("http", func(t *testing.T) { checkBurst(t, c, "http", httpAnswers) })
	t.Run("nats", func(t *testing.T) { checkBurst(t, c, "nats", natsAnswers) })
}

// checkLeak checks that the queued jobs of answers started at the leak
// rate (jobs per second) ±5%, measured at the webhook from the first
// queued job's start to the last.
func checkLeak(t *testing.T, c *cluster, answers []answer, leak float64) {
	t.Helper()
	n := tally(answers)
	t.Logf("token bucket burst of %d: %v", len(answers), n)
	queued := map[string]bool{}
	for _, a := range answers {
		if a.Reply.Status == spillway.Queued {
			queued[a.Reply.ID] = true
		}
	}
	if len(queued) < 50 || n[spillway.Rejected] != 0 {
		t.Fatalf("want ≥ 50 queued and none rejected, got %v", n)
	}
	var starts []time.Time
	waitFor(t, time.Duration(float64(len(queued))/leak*1.5+10)*time.Second, "every queued token job at the webhook", func() bool {
		starts = starts[:0]
		seen := map[string]bool{}
		for _, h := range c.hook.snapshot() {
			if queued[h.ID] && !seen[h.ID] {
				seen[h.ID] = true
				starts = append(starts, h.At)
			}
		}
		return len(seen) == len(queued)
	})
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	span := starts[len(starts)-1].Sub(starts[0])
	rate := float64(len(starts)-1) / span.Seconds()
	t.Logf("%d backlog jobs started over %v: %.4f/s against a leak rate of %.0f/s (%+.2f%%)", len(starts), span, rate, leak, 100*(rate-leak)/leak)
	if rate < leak*0.95 || rate > leak*1.05 {
		t.Errorf("backlog drained at %.3f/s, want %.0f/s ±5%%", rate, leak)
	}
}
