package e2e

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWeightsReachWaitingJobs: 300 + 300 due jobs of keys a and b wait in
// the backlog at leak 30/s, both of weight 1. A second into the drain the
// admitters reload a file that gives a weight 3: from 3 s to 8 s after the
// change a has at least 70 % of the starts — the new weight reached the
// jobs already waiting, which carry the weight stamped at their submission
// (1). The workers run a copy of the first file, so the weights reach them
// only the way the admitters publish them (docs/design.md#fair-drain).
func TestWeightsReachWaitingJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("600 jobs drained for 9 s; -short skips it")
	}
	const leak = 30.0
	r := fdStart(t, leak, "30/s", "", fdRetry, "")
	r.fill("normal", 300, "a", "b")
	first, err := os.ReadFile(r.c.config)
	if err != nil {
		t.Fatal(err)
	}
	workerConfig := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(workerConfig, first, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r.c.workers = append(r.c.workers, start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", workerConfig, "--metrics-listen", "127.0.0.1:0"))
	}
	backlogPullers(t, r.c.nats.URL(), workerConfig, "fair", 2)
	time.Sleep(time.Second) // the drain runs at weights 1/1

	reloads := func(p *process) float64 {
		return metric(t, p.addr, `spillway_config_reloads_total{result="success"}`)
	}
	var before []float64
	for _, a := range r.c.admitters {
		before = append(before, reloads(a))
	}
	changed := strings.Replace(string(first), "backlog: {capacity: 20000, leak_rate: 30/s}", `backlog: {capacity: 20000, leak_rate: 30/s, fairness: {weights: {a: 3}}}`, 1)
	if changed == string(first) {
		t.Fatal("the test's config has no backlog line to give weights to")
	}
	tmp := r.c.config + ".new"
	if err := os.WriteFile(tmp, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.c.config); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.c.admitters {
		a.signal(syscall.SIGHUP)
	}
	for i, a := range r.c.admitters {
		waitFor(t, 10*time.Second, "admitter "+strconv.Itoa(i)+" reloaded the weights", func() bool { return reloads(a) > before[i] })
	}
	change := time.Now()
	from, to := change.Add(3*time.Second), change.Add(8*time.Second)
	time.Sleep(time.Until(to.Add(500 * time.Millisecond)))

	ss := r.starts(r.c.hook.snapshot())
	n, total := countIn(ss, from, to, func(s fdStartAt) string { return s.Key })
	share := 100 * float64(n["a"]) / math.Max(1, float64(total))
	figure(t, "weights changed to a:3, b:1 a second into the drain of 300 + 300 waiting jobs at leak 30/s: 3–8 s after the change a had %.1f%% of the %d starts (a %d, b %d)",
		share, total, n["a"], n["b"])
	if share < 70 {
		t.Errorf("3–8 s after the weights changed to a:3, b:1, key a had %.1f%% of the %d starts, want ≥ 70%% (75%% at 3:1): the change did not reach the waiting jobs", share, total)
	}
	if done, _ := countIn(ss, time.Time{}, to, func(s fdStartAt) string { return s.Key }); done["a"] >= 300 || done["b"] >= 300 {
		t.Fatalf("a key's backlog ran dry before the measurement ended (%v started): the test measured no contention", done)
	}
	// Enough starts that the share means something. The leak's own rate
	// is held to its bounds by the leak tests; here, on a machine loaded
	// to 6 runnable threads a core, one run in 25 saw 134 starts (89 %).
	if total < int(5*leak)*3/4 {
		t.Errorf("%d starts in the 5 s measured, want at least %d of about %d (leak 30/s): too few to weigh shares by", total, int(5*leak)*3/4, int(5*leak))
	}
}
