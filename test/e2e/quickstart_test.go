package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestQuickStart follows README's Quick start with the built binaries:
// `admitter --dev` alone (embedded JetStream, in-process workers, the demo
// queue), thirty submissions of one client over HTTP, then spillctl
// submit, status and queues. Only the ports differ from the README.
func TestQuickStart(t *testing.T) {
	adm := start(t, "admitter-dev", bins.admitter, "--dev", "--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
	server := "http://" + adm.addr
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)

	// for i in $(seq 30); do curl -s -X POST -H 'X-Client-Id: me' --data "job $i" localhost:8080/v1/queues/demo/jobs; echo; done
	var answers []answer
	var sent []time.Time
	began := time.Now()
	for i := range 30 {
		sent = append(sent, time.Now())
		answers = append(answers, submitHTTP(t, client, adm.addr, "demo", map[string]string{"X-Client-Id": "me"}, []byte("job "+strconv.Itoa(i+1))))
	}
	took := time.Since(began)
	n := tally(answers)
	t.Logf("30 jobs of one client on the demo queue (leaky_bucket 5/s, burst 20, delay 5) in %v: %v", took.Round(time.Millisecond), n)
	// README's answer, 6 admitted, 15 queued and 9 rejected, is for
	// submissions made within 200 ms (one leak of 5/s). A loaded machine
	// may take longer, and each unit leaked meanwhile lets one more in
	// (admitted if it leaked while the first six were answered).
	leaked := int(5 * took.Seconds())
	if accepted := n[spillway.Admitted] + n[spillway.Queued]; n[spillway.Admitted] < 6 || n[spillway.Admitted] > 6+leaked || accepted < 21 || accepted > 21+leaked || n[spillway.Rejected] != 30-accepted {
		t.Errorf("got %v in %v, want 6 admitted, 15 queued, 9 rejected (up to %d more accepted for the time taken)", n, took.Round(time.Millisecond), leaked)
	}

	// The admitter's first status record of the last queued job (due in
	// about 3 s) says queued.
	var lastQueued string
	for _, a := range answers {
		if a.Reply.Status == spillway.Queued {
			lastQueued = a.Reply.ID
		}
	}
	waitFor(t, 5*time.Second, "the status record of a queued job", func() bool {
		resp, err := get(client, server+"/v1/jobs/"+lastQueued)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rec struct{ State string }
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&rec) == nil && rec.State == "queued"
	})

	spill := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(context.Background(), bins.spillctl, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return out.String(), exit.ExitCode()
		case err != nil:
			t.Fatalf("spillctl %v: %v", args, err)
		}
		return out.String(), 0
	}
	// The last rejection said when the next unit frees; a 31st job decided
	// before then is rejected. A loaded machine may start spillctl after
	// it, and then the job is rightly queued.
	last := -1
	for i, a := range answers {
		if a.Reply.Status == spillway.Rejected {
			last = i
		}
	}
	// spillctl submit --queue demo --header X-Client-Id=me --data hello
	out, code := spill("submit", "--server", server, "--queue", "demo", "--header", "X-Client-Id=me", "--data", "hello")
	t.Logf("spillctl submit (client me): exit %d: %s", code, strings.TrimSpace(out))
	switch rejected := code == 3 && strings.HasPrefix(out, "rejected"); {
	case last < 0:
		t.Errorf("none of the 30 jobs was rejected: the 31st has no answer to be held to")
	case time.Now().Before(sent[last].Add(time.Duration(answers[last].Reply.RetryAfterMS)*time.Millisecond)) && !rejected:
		t.Errorf("the 31st job of client me, before the unit the last rejection named freed: exit %d, %q; want rejected, exit 3", code, out)
	case !rejected && (code != 0 || !strings.HasPrefix(out, "queued")):
		t.Errorf("the 31st job of client me, after the unit the last rejection named freed: exit %d, %q; want rejected (exit 3) or queued (exit 0)", code, out)
	}
	out, code = spill("submit", "--server", server, "--queue", "demo", "--header", "X-Client-Id=you", "--data", "hello")
	t.Logf("spillctl submit (client you): exit %d: %s", code, strings.TrimSpace(out))
	m := regexp.MustCompile(`^admitted\s+id=(\S+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("another client's job: exit %d, %q; want admitted", code, out)
	}
	waitFor(t, 10*time.Second, "the demo worker to finish the job", func() bool {
		out, code := spill("status", "--server", server, m[1])
		return code == 0 && strings.Contains(out, "succeeded")
	})
	out, code = spill("queues", "--server", server)
	t.Logf("spillctl queues:\n%s", out)
	if code != 0 || !strings.Contains(out, "demo") {
		t.Errorf("spillctl queues: exit %d\n%s", code, out)
	}
	waitFor(t, 15*time.Second, "the demo backlog to drain", func() bool {
		out, code := spill("queues", "--server", server, "--json")
		var list spillway.QueueList
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Queues) != 1 {
			t.Fatalf("spillctl queues --json: exit %d\n%s", code, out)
		}
		return list.Queues[0].Depth == 0 && list.Queues[0].Ready == 0
	})
	if err := adm.stop(30 * time.Second); err != nil {
		t.Errorf("admitter --dev on SIGTERM: %v", err)
	}
}
