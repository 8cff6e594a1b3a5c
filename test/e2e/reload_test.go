package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const reloadConfig = `
nats: {url: "%s"}
http: {listen: "127.0.0.1:0"}
queues:
  - name: r
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: %d, nodelay: true}
    backlog: {capacity: 100, leak_rate: 1/s}
`

// TestConfigReload: a changed file applies new limits without a restart;
// an invalid one is logged, counted and kept out; SIGHUP reloads too.
func TestConfigReload(t *testing.T) {
	nats := queuetest.Start(t)
	path := writeFile(t, "spillway.yaml", fmt.Sprintf(reloadConfig, nats.URL(), 2))
	adm := start(t, "admitter", bins.admitter, "--config", path)
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	key := 0
	admitted := func() int { // a fresh client's burst: burst+1 admitted
		key++
		n := 0
		for range 15 {
			a := submitHTTP(t, client, adm.addr, "r", map[string]string{"X-Client": "c" + strconv.Itoa(key)}, []byte("x"))
			if a.Reply.Status == spillway.Admitted {
				n++
			}
		}
		return n
	}
	reloads := func(result string) int {
		resp, err := get(client, "http://"+adm.addr+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`spillway_config_reloads_total\{result="` + result + `"\} (\d+)`).FindSubmatch(b)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	write := func(content string) {
		t.Helper()
		// Replaced by rename, as editors do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}

	if n := admitted(); n != 3 {
		t.Fatalf("burst 2: %d admitted, want 3", n)
	}
	write(fmt.Sprintf(reloadConfig, nats.URL(), 9))
	waitFor(t, 10*time.Second, "the changed file to be applied", func() bool { return reloads("success") >= 1 })
	if n := admitted(); n != 10 {
		t.Errorf("after the reload to burst 9: %d admitted, want 10", n)
	}
	write("queues: [{name: r, limits: [{key: global, rate: ten}]}]\n")
	waitFor(t, 10*time.Second, "the invalid file to be counted", func() bool { return reloads("failure") >= 1 })
	if n := admitted(); n != 10 {
		t.Errorf("after an invalid file: %d admitted, want the running burst 9 (10)", n)
	}
	// SIGHUP: the file is read again even if unchanged since the last poll.
	before := reloads("success")
	write(fmt.Sprintf(reloadConfig, nats.URL(), 4))
	adm.signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the reload after SIGHUP", func() bool { return reloads("success") > before })
	if n := admitted(); n != 5 {
		t.Errorf("after SIGHUP with burst 4: %d admitted, want 5", n)
	}
	t.Logf("reloads: %d applied, %d refused", reloads("success"), reloads("failure"))
}
