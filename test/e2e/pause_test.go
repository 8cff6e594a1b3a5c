package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// pauseConfig is one queue whose jobs past the first 40 go to the
// backlog, leaking at 20/s, with an admin keys file:
// fmt.Sprintf(pauseConfig, natsURL, redisAddr, webhookURL, adminKeysFile).
const pauseConfig = `
nats: {url: "%[1]s"}
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 1s}
http: {listen: "127.0.0.1:0", admin_keys_file: "%[4]s"}
worker: {concurrency: 8, grace_period: 5s}
queues:
  - name: hold
    limits:
      - {name: all, key: global, algorithm: token_bucket, rate: 1/h, burst: 40}
    backlog: {capacity: 5000, leak_rate: 20/s}
    handler: {http: {url: "%[3]s/hold", timeout: 5s}}
`

const e2eAdminKey = "e2e-admin-0123456789abcdef"

// TestPauseUnderLoad runs an admitter and two worker processes draining
// a backlog at 20/s and submitting all along. A pause through the admin
// endpoint stops every handler start from a second after it until the
// resume; after the resume the backlog starts at 20/s (queuetest.CheckDrainRate: within 1% with the machine to itself); every
// job stored runs exactly once.
func TestPauseUnderLoad(t *testing.T) {
	keys := writeFile(t, "admin-keys", "# operators\n"+e2eAdminKey+"\n")
	c := afCluster(t, 1, 2, pauseConfig, keys)
	client, _ := afClients(t, c)
	adm := c.admitters[0].addr
	backlogPullers(t, c.nats.URL(), c.config, "hold", 2)

	var ids []string
	submit := func(n int) {
		for range n {
			a := submitHTTP(t, client, adm, "hold", nil, []byte(`{}`))
			if a.Reply.Status != spillway.Admitted && a.Reply.Status != spillway.Queued {
				t.Fatalf("a submission: %d %+v, want admitted or queued", a.Code, a.Reply)
			}
			ids = append(ids, a.Reply.ID)
		}
	}
	submit(300) // 40 admitted, the rest queued: 13 s of draining
	waitFor(t, 30*time.Second, "60 jobs started", func() bool { return len(c.hook.countByID()) >= 60 })

	admin := func(verb, key, body string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+adm+"/v1/queues/hold/"+verb, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, resp.Status)
		return resp.StatusCode, b.String()
	}
	if code, st := admin("pause", "", ""); code != http.StatusUnauthorized {
		t.Errorf("pause without a key: %s, want 401", st)
	}
	pausedAt := time.Now()
	if code, st := admin("pause", e2eAdminKey, `{"reason": "e2e"}`); code != http.StatusOK {
		t.Fatalf("pause: %s, want 200", st)
	}
	submit(20) // admission goes on while paused
	time.Sleep(4 * time.Second)
	resumedAt := time.Now()
	if code, st := admin("resume", e2eAdminKey, ""); code != http.StatusOK {
		t.Fatalf("resume: %s, want 200", st)
	}
	waitFor(t, 60*time.Second, "every job started", func() bool { return len(c.hook.countByID()) >= len(ids) })
	time.Sleep(time.Second) // a start twice would show by now

	counts := c.hook.countByID()
	lost := 0
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("job %s started %d times, want once", id, counts[id])
			lost++
		}
	}
	var during int
	var after []time.Time
	for _, h := range c.hook.snapshot() {
		switch {
		case h.At.After(pausedAt.Add(time.Second)) && h.At.Before(resumedAt):
			during++
		case h.At.After(resumedAt):
			after = append(after, h.At)
		}
	}
	if during != 0 {
		t.Errorf("%d handler starts between 1 s after the pause and the resume, want 0", during)
	}
	slices.SortFunc(after, time.Time.Compare)
	if len(after) < 100 {
		t.Fatalf("%d starts after the resume, want at least 100 to measure the rate", len(after))
	}
	span := after[len(after)-1].Sub(after[0])
	rate := float64(len(after)-1) / span.Seconds()
	t.Logf("pause of %v: %d starts from 1 s after it to the resume; after the resume %d starts at %.3f/s over %v (%.2f%% off 20/s); %d of %d jobs not run exactly once",
		resumedAt.Sub(pausedAt).Round(time.Millisecond), during, len(after), rate, span.Round(time.Millisecond), 100*(rate/20-1), lost, len(ids))
	queuetest.CheckDrainRate(t, "starts after the resume", rate, 20)
}
