package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const honestConfig = `
nats: {url: "%[1]s"}
http: {listen: "127.0.0.1:0"}
queues:
  - name: twotier
    limits:
      - {key: "header:X-Api-Key", algorithm: leaky_bucket, rate: 1/s, burst: 10}
      - {key: global, algorithm: token_bucket, rate: 1/h, burst: 3}
    backlog: {capacity: 100, leak_rate: 100/s}
    handler: {http: {url: "%[2]s/twotier", timeout: 5s}}
  - name: keyfull
    limits:
      - {key: "header:X-Api-Key", algorithm: leaky_bucket, rate: 30/m, burst: 10}
    backlog: {capacity: 100, per_key_capacity: 3, leak_rate: 100/s}
    handler: {http: {url: "%[2]s/keyfull", timeout: 5s}}
`

// TestHonestNotBeforeAndRetryAfter runs the real admitter and worker.
// Two tiers: jobs the token tier calls excess still start no earlier than
// the leaky tier queued them. A key whose share of the backlog is full is
// told, in Retry-After, when its first queued job leaves: a retry then is
// stored.
func TestHonestNotBeforeAndRetryAfter(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	hook := newWebhook(t)
	cfg := writeFile(t, "spillway.yaml", fmt.Sprintf(honestConfig, srv.URL(), hook.srv.URL))
	adm := start(t, "admitter", bins.admitter, "--config", cfg)
	start(t, "worker", bins.worker, "--config", cfg, "--metrics-listen", "127.0.0.1:0")
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	for _, q := range []string{"twotier", "keyfull"} {
		waitFor(t, 30*time.Second, "the worker to drain "+q, func() bool {
			resp, err := get(client, "http://"+adm.addr+"/v1/queues/"+q)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var qi spillway.QueueInfo
			decodeJSON(t, resp.Body, &qi)
			return qi.BacklogPullers > 0
		})
	}
	key := map[string]string{"X-Api-Key": "k"}

	var two []answer
	for range 5 {
		two = append(two, submitHTTP(t, client, adm.addr, "twotier", key, []byte("job")))
	}
	for i, a := range two[1:] {
		if a.Reply.Status != spillway.Queued || a.Reply.NotBefore == nil {
			t.Fatalf("twotier job %d: %d %+v, want queued with a not_before", i+2, a.Code, a.Reply)
		}
	}

	var kf []answer
	for range 5 {
		kf = append(kf, submitHTTP(t, client, adm.addr, "keyfull", key, []byte("job")))
	}
	refused := kf[4]
	answered := time.Now()
	if refused.Code != http.StatusTooManyRequests || refused.Reply.Type != spillway.ProblemKeyFull {
		t.Fatalf("keyfull job 5: %d %+v, want 429 %s", refused.Code, refused.Reply, spillway.ProblemKeyFull)
	}
	secs, err := strconv.Atoi(refused.RetryAfter)
	if err != nil || int64(secs) != (refused.Reply.RetryAfterMS+999)/1000 {
		t.Fatalf("Retry-After %q with retry_after_ms %d: want the whole seconds rounded up", refused.RetryAfter, refused.Reply.RetryAfterMS)
	}
	if kf[1].Reply.NotBefore == nil {
		t.Fatalf("keyfull job 2: %d %+v, want queued with a not_before", kf[1].Code, kf[1].Reply)
	}
	firstDue := *kf[1].Reply.NotBefore
	t.Logf("key-full: Retry-After %s, retry_after_ms %d; the key's first queued job due %v after the answer",
		refused.RetryAfter, refused.Reply.RetryAfterMS, firstDue.Sub(answered).Round(time.Millisecond))
	retry := answered.Add(time.Duration(secs) * time.Second)
	if retry.Before(firstDue) {
		t.Errorf("Retry-After %s: %v before the key's first queued job is due", refused.RetryAfter, firstDue.Sub(retry).Round(time.Millisecond))
	}
	time.Sleep(time.Until(retry))
	if again := submitHTTP(t, client, adm.addr, "keyfull", key, []byte("job")); again.Code != http.StatusAccepted {
		// Forgiven only if the worker, running late on a loaded machine,
		// ran the key's first queued job after its due time and the margin
		// Retry-After adds (200 ms): then the room came late, not the answer.
		var reached time.Time
		waitFor(t, 10*time.Second, "the key's first queued job at the webhook", func() bool {
			for _, h := range hook.snapshot() {
				if h.ID == kf[1].Reply.ID {
					reached = h.At
					return true
				}
			}
			return false
		})
		if !reached.After(firstDue.Add(200 * time.Millisecond)) {
			t.Fatalf("retried after Retry-After %s: %d %+v, want 202; the key's first queued job reached the webhook on time, %v after it was due",
				refused.RetryAfter, again.Code, again.Reply, reached.Sub(firstDue).Round(time.Millisecond))
		}
		waitFor(t, 2*time.Second, "a retry to be stored once the late worker has run the key's first queued job", func() bool {
			return submitHTTP(t, client, adm.addr, "keyfull", key, []byte("job")).Code == http.StatusAccepted
		})
		t.Logf("the retry at Retry-After %s came before the room: the key's first queued job reached the webhook %v after it was due",
			refused.RetryAfter, reached.Sub(firstDue).Round(time.Millisecond))
	}

	// Every twotier job ran, none before its not_before.
	waitFor(t, 30*time.Second, "the twotier jobs at the webhook", func() bool {
		n := hook.countByID()
		for _, a := range two {
			if n[a.Reply.ID] == 0 {
				return false
			}
		}
		return true
	})
	began := map[string]time.Time{}
	for _, h := range hook.snapshot() {
		if _, ok := began[h.ID]; !ok {
			began[h.ID] = h.At
		}
	}
	for i, a := range two[1:] {
		if at := began[a.Reply.ID]; at.Before(*a.Reply.NotBefore) {
			t.Errorf("twotier job %d started %v before its not_before", i+2, a.Reply.NotBefore.Sub(at))
		}
	}
}
