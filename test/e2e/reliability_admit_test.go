package e2e

// The reliability suite's admission cases (docs/reliability.md):
// idempotent submit within and after the dedup window, backlog and per-key
// backlog full, kill -9 of an admitter between the bucket decision and the
// publish, and config reload under load. Helpers of this file are prefixed af_ (admission
// faults) / af.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// afCluster starts one JetStream, one Redis and a webhook, writes the
// configuration fmt.Sprintf(tmpl, natsURL, redisAddr, webhookURL, extra...)
// and runs nAdm admitters and nWork workers on it.
func afCluster(t *testing.T, nAdm, nWork int, tmpl string, extra ...any) *cluster {
	t.Helper()
	c := &cluster{nats: queuetest.Start(t), redis: redistest.Start(t, redistest.WithOwnProcess()), hook: newWebhook(t)}
	args := append([]any{c.nats.URL(), c.redis.Addr(), c.hook.srv.URL}, extra...)
	c.config = writeFile(t, "spillway.yaml", fmt.Sprintf(tmpl, args...))
	for i := range nAdm {
		c.admitters = append(c.admitters, start(t, "admitter"+strconv.Itoa(i), bins.admitter, "--config", c.config))
	}
	for i := range nWork {
		c.workers = append(c.workers, start(t, "worker"+strconv.Itoa(i), bins.worker, "--config", c.config, "--metrics-listen", "127.0.0.1:0"))
	}
	return c
}

// afClients returns an HTTP client (closed in cleanup) and a NATS
// connection to c's server.
func afClients(t *testing.T, c *cluster) (*http.Client, *nats.Conn) {
	t.Helper()
	client := apitest.Client(t, &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}})
	t.Cleanup(client.CloseIdleConnections)
	nc, err := nats.Connect(c.nats.URL(), nats.Name("e2e-reliability-admit"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return client, nc
}

// afSeries is one scrape of a /metrics page: value by series, the series
// written as on the page (name{labels in the exporter's order}).
type afSeries map[string]float64

var afSampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// afScrape reads the Prometheus text page at http://addr/metrics.
func afScrape(t *testing.T, client *http.Client, addr string) afSeries {
	t.Helper()
	resp, err := get(client, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	defer resp.Body.Close()
	s := afSeries{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := afSampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s[m[1]+m[2]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	return s
}

// afLabel extracts one label's value from a series name.
func afLabel(series, label string) string {
	i := strings.Index(series, label+`="`)
	if i < 0 {
		return ""
	}
	rest := series[i+len(label)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// sum adds the values of the series named name whose labels include every
// label="value" of want.
func (s afSeries) sum(name string, want ...string) float64 {
	var n float64
	for k, v := range s {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			if afLabel(k, want[i]) != want[i+1] {
				ok = false
			}
		}
		if ok {
			n += v
		}
	}
	return n
}

// afDecisions sums spillway_decisions_total{queue=q} over the admitters,
// by "verdict/reason".
func afDecisions(t *testing.T, client *http.Client, admitters []*process, q string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range admitters {
		for k, v := range afScrape(t, client, a.addr) {
			if !strings.HasPrefix(k, "spillway_decisions_total{") || afLabel(k, "queue") != q || v == 0 {
				continue
			}
			out[afLabel(k, "verdict")+"/"+afLabel(k, "reason")] += int(v)
		}
	}
	return out
}

// afReloads is spillway_config_reloads_total{result} of one admitter.
func afReloads(t *testing.T, client *http.Client, a *process, result string) int {
	t.Helper()
	return int(afScrape(t, client, a.addr).sum("spillway_config_reloads_total", "result", result))
}

// afStreamIDs reads every message of a stream: job id → subject.
func afStreamIDs(t *testing.T, natsURL, stream string) map[string]string {
	t.Helper()
	msgs, state := streamMsgs(t, natsURL, stream)
	ids := map[string]string{}
	for _, m := range msgs {
		ids[m.Header.Get(spillway.HeaderJobID)] = m.Subject
	}
	if uint64(len(ids)) != state.Msgs {
		t.Errorf("stream %s: %d messages, %d distinct job ids", stream, state.Msgs, len(ids))
	}
	return ids
}

// afStreamMsgs is how many messages a stream holds.
func afStreamMsgs(t *testing.T, natsURL, stream string) uint64 {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Name("e2e-stream-reader"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// afReason is the decision metric's verdict/reason that an answer stands
// for (internal/admit's reason()).
func afReason(a answer) string {
	switch a.Reply.Status {
	case spillway.Admitted, spillway.Queued:
		return string(a.Reply.Status) + "/limit"
	case spillway.Rejected:
		switch a.Reply.Type {
		case spillway.ProblemQueueFull:
			return "rejected/backlog_full"
		case spillway.ProblemKeyFull:
			return "rejected/key_backlog_full"
		}
		return "rejected/limit"
	}
	return "error/" + a.Reply.Type
}

// afSubmit sends one submission through door i%3: HTTP to admitter 0,
// HTTP to admitter 1 (if any), or NATS (any admitter).
func afSubmit(t *testing.T, c *cluster, client *http.Client, nc *nats.Conn, i int, q string, h map[string]string, body []byte) answer {
	switch {
	case i%3 == 2 || len(c.admitters) == 0:
		return submitNATS(t, nc, q, h, body)
	default:
		return submitHTTP(t, client, c.admitters[i%3%len(c.admitters)].addr, q, h, body)
	}
}

// ---------------------------------------------------------------------
// idempotent submit within and after the dedup window.

const afIdemConfig = `
nats: {url: "%[1]s"}
# A decision's budget well above a loaded machine's stalls: these tests
# are about admission, not the store's failure mode (the Redis fault tests).
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 2s}
http: {listen: "127.0.0.1:0"}
status: {ttl: %[4]s}
worker: {concurrency: 16, grace_period: 5s}
queues:
  - name: idem
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: %[5]d, nodelay: true}
    backlog: {capacity: 10000, leak_rate: 100/s}
    handler: {http: {url: "%[3]s/idem", timeout: 5s}}
`

// TestReliabilityIdempotentSubmit: N idempotency keys,
// each sent R times at once through both doors and both admitters, then
// R more times one after another once its job has run, all within the
// dedup window → one job id per key, every other answer a duplicate, one
// execution and one unit per key. The window is the idempotency record's
// lifetime, status.ttl (internal/admit/idempotency.go: a JetStream KV
// bucket with that TTL); once it has passed (the bucket is empty again)
// one more retry per key is a new submission: a new job id, a second
// unit, a second execution. Those duplicates are counted.
func TestReliabilityIdempotentSubmit(t *testing.T) {
	// The 240 tries and the wait for 20 jobs to run must fit in the window
	// on a loaded machine too.
	ttl := time.Duration(scale(10, 30)) * time.Second
	nKeys, tries := scale(20, 200), scale(6, 10)
	// Units: one per key within the window and one per key after it; the
	// probe at the end finds the rest of the bucket (spare units).
	const spare = 6
	bucketBurst := 2*nKeys + spare - 1
	c := afCluster(t, 2, 2, afIdemConfig, ttl.String(), bucketBurst)
	client, nc := afClients(t, c)
	l := newLedger()
	// send submits key through door i%3; over NATS every other try
	// names the key in Nats-Msg-Id instead of Idempotency-Key: one key
	// space for both headers and both doors.
	send := func(i int, key string) answer {
		h := map[string]string{"X-Client": "idem-client"}
		if i%3 == 2 && (i/3)%2 == 1 {
			h[spillway.HeaderMsgID] = key
		} else {
			h[spillway.HeaderIdempotencyKey] = key
		}
		a := afSubmit(t, c, client, nc, i, "idem", h, []byte("order "+key))
		l.record(a)
		return a
	}
	keys := make([]string, nKeys)
	for k := range keys {
		keys[k] = fmt.Sprintf("order-%d-%d", time.Now().UnixNano(), k)
	}

	// Within the window: every try of every key at once.
	type try struct {
		key  string
		sent time.Time
		a    answer
	}
	begin := time.Now()
	first := burst(nKeys*tries, func(i int) answer { return send(i, keys[i%nKeys]) })
	var within []try
	for i, a := range first {
		within = append(within, try{key: keys[i%nKeys], sent: begin, a: a})
	}
	// Then, once each key's job has run, R more tries one after another
	// (the record now answers a job that has completed).
	idOf := map[string]string{}
	for _, tr := range within {
		if tr.a.Reply.Status == spillway.Admitted && !tr.a.Reply.Duplicate {
			idOf[tr.key] = tr.a.Reply.ID
		}
	}
	waitFor(t, 60*time.Second, "every key's job at the webhook", func() bool {
		runs := c.hook.countByID()
		for _, id := range idOf {
			if runs[id] == 0 {
				return false
			}
		}
		return len(idOf) == nKeys
	})
	for r := range tries {
		for k, key := range keys {
			sent := time.Now()
			a := send(r*nKeys+k, key)
			within = append(within, try{key: key, sent: sent, a: a})
		}
	}
	// A retry is surely within the window if it was sent less than the TTL
	// after the first submission started (the record is written after
	// that, and lives TTL from its last write); one sent later is at the
	// edge and is only counted.
	safe := begin.Add(ttl - 500*time.Millisecond)
	var inWindow, edge, wrongID, notDup, failed int
	firstAnswers := map[string]int{}
	for _, tr := range within {
		if tr.sent.After(safe) {
			edge++
			continue
		}
		inWindow++
		switch {
		case tr.a.Reply.Status != spillway.Admitted:
			failed++
			t.Errorf("key %s: answer %+v (code %d), want admitted", tr.key, tr.a.Reply, tr.a.Code)
		case tr.a.Reply.ID != idOf[tr.key]:
			wrongID++
		case !tr.a.Reply.Duplicate:
			firstAnswers[tr.key]++
		}
	}
	for _, key := range keys {
		if firstAnswers[key] != 1 {
			notDup++
		}
	}
	if inWindow < nKeys*tries {
		t.Errorf("only %d tries were sent safely within the %v window (%d at its edge): the machine is too slow for this window", inWindow, ttl, edge)
	}
	if wrongID != 0 || notDup != 0 || failed != 0 {
		t.Errorf("within the window: %d answers with another job id, %d keys without exactly one first answer, %d not admitted", wrongID, notDup, failed)
	}

	// After the window: the records are gone from the KV bucket.
	waitFor(t, ttl+60*time.Second, "the idempotency records to expire", func() bool {
		var n uint64
		for i := range queue.KVShards {
			n += afStreamMsgs(t, c.nats.URL(), "KV_"+queue.ShardBucket(admit.IdempotencyBucket, i))
		}
		return n == 0
	})
	expired := time.Since(begin)
	after := burst(nKeys, func(k int) answer { return send(k, keys[k]) })
	var newJobs, reused int
	secondID := map[string]string{}
	for k, a := range after {
		switch {
		case a.Reply.Status != spillway.Admitted:
			t.Errorf("after the window, key %s: %+v (code %d), want admitted", keys[k], a.Reply, a.Code)
		case a.Reply.ID == idOf[keys[k]] || a.Reply.Duplicate:
			reused++
		default:
			newJobs++
			secondID[keys[k]] = a.Reply.ID
		}
	}

	// Units: a probe without idempotency key takes what is left of the
	// client's bucket. Each key should have taken one unit within the
	// window and one after it: spare units are left.
	probes := 0
	for range bucketBurst + 2 {
		a := submitHTTP(t, client, c.admitters[0].addr, "idem", map[string]string{"X-Client": "idem-client"}, []byte("probe"))
		l.record(a)
		if a.Reply.Status != spillway.Admitted {
			break
		}
		probes++
	}
	units := bucketBurst + 1 - probes

	settle(t, l, c.hook, c.nats.URL(), "idem", 60*time.Second)
	time.Sleep(500 * time.Millisecond) // a redelivered duplicate would arrive about now
	r := reconcile(l, c.hook.executions(), deadLetters(t, c.nats.URL(), "idem"))
	// Executions per idempotency key: the logical submission ran this
	// many times.
	runs := c.hook.countByID()
	dupWithin, dupAfter := 0, 0
	for _, key := range keys {
		dupWithin += runs[idOf[key]] - 1
		if id, ok := secondID[key]; ok && runs[id] > 0 {
			dupAfter += runs[id]
		}
	}

	t.Logf("ledger: %s; %s", l, r)
	figure(t, "within the %v window: %d keys × %d tries (%d at once, %d after the job ran; both doors, both admitters) → %d jobs, %d duplicate executions, %d answers naming another job",
		ttl, nKeys, 2*tries, nKeys*tries, nKeys*tries, len(idOf), dupWithin, wrongID)
	figure(t, "after the window (records expired %v after the first try): %d retries → %d new jobs (%d executions), %d answered from the old record",
		expired.Round(time.Millisecond), nKeys, newJobs, dupAfter, reused)
	figure(t, "units taken: %d for %d keys (one within the window, one after it, per key); lost %d, extra executions %d",
		units, nKeys, r.Lost, r.Extra)
	if dupWithin != 0 || r.Extra != 0 {
		t.Errorf("within the window: %d duplicate executions, %d extra executions; want 0", dupWithin, r.Extra)
	}
	if r.Lost != 0 {
		t.Errorf("%d accepted jobs lost: %v", r.Lost, r.LostIDs)
	}
	if newJobs != nKeys || dupAfter != nKeys {
		t.Errorf("after the window: %d new jobs and %d executions for %d keys; want a new job each (the key is forgotten)", newJobs, dupAfter, nKeys)
	}
	if units != 2*nKeys {
		t.Errorf("units taken: %d, want %d (one per key within the window, one per key after it)", units, 2*nKeys)
	}
}

// ---------------------------------------------------------------------
// backlog full and per-key backlog full.

const afFullConfig = `
nats: {url: "%[1]s"}
# A decision's budget well above a loaded machine's stalls: these tests
# are about admission, not the store's failure mode (the Redis fault tests).
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 2s}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 16, grace_period: 5s}
queues:
  - name: full
    limits:
      # The first job of a key is admitted (e' = 0 ≤ delay); every later
      # one is queued an hour apart, so the backlog only fills.
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 1000, delay: 0}
    backlog: {capacity: %[4]d, per_key_capacity: %[5]d, leak_rate: 10/s}
    handler: {http: {url: "%[3]s/full", timeout: 5s}}
`

// TestReliabilityBacklogFull: bursts through both doors
// and both admitters into a backlog that can only fill. Phase 1, one key:
// per_key_capacity jobs queued, the rest 429 key-full. Phase 2, several
// keys: the backlog fills to exactly its capacity, the rest 429 (key-full
// or queue-full). Every refusal carries Retry-After; the BACKLOG stream
// holds exactly the jobs answered queued (by id, none silently dropped,
// none extra); the admitters' spillway_decisions_total by verdict/reason
// equals the ledger's counts; the admitted jobs run.
func TestReliabilityBacklogFull(t *testing.T) {
	capacity, perKey := scale(50, 2000), scale(20, 200)
	keyBurst := scale(40, 400)                        // phase 1: one key
	keys, perKeyBurst := scale(5, 20), scale(20, 300) // phase 2
	c := afCluster(t, 2, 1, afFullConfig, capacity, perKey)
	client, nc := afClients(t, c)
	l := newLedger()
	send := func(i int, key string) answer {
		a := afSubmit(t, c, client, nc, i, "full", map[string]string{"X-Client": key}, []byte("job "+strconv.Itoa(i)))
		l.record(a)
		return a
	}
	check := func(phase string, answers []answer, wantAdmitted, wantQueued int) map[string]int {
		t.Helper()
		n := map[string]int{}
		for _, a := range answers {
			n[afReason(a)]++
			if a.Reply.Status != spillway.Rejected {
				continue
			}
			if a.Reply.RetryAfterMS <= 0 {
				t.Errorf("%s: a rejection without retry_after_ms: %+v", phase, a.Reply)
			}
			if a.Code != 0 && (a.Code != http.StatusTooManyRequests || a.RetryAfter == "") {
				t.Errorf("%s: a rejection over HTTP with status %d, Retry-After %q; want 429 with Retry-After", phase, a.Code, a.RetryAfter)
			}
		}
		rejected := len(answers) - wantAdmitted - wantQueued
		if n["admitted/limit"] != wantAdmitted || n["queued/limit"] != wantQueued || n["rejected/backlog_full"]+n["rejected/key_backlog_full"] != rejected {
			t.Errorf("%s: %v; want %d admitted, %d queued, %d rejected for a full backlog", phase, n, wantAdmitted, wantQueued, rejected)
		}
		return n
	}

	// Phase 1: one key, per-key bound.
	p1 := check("one key", burst(keyBurst, func(i int) answer { return send(i, "noisy") }), 1, perKey)
	if p1["rejected/backlog_full"] != 0 {
		t.Errorf("one key: %d answered queue-full, but the queue has room", p1["rejected/backlog_full"])
	}
	// Phase 2: several keys, the queue's bound (what is left of it).
	p2 := check("several keys", burst(keys*perKeyBurst, func(i int) answer { return send(i, "key-"+strconv.Itoa(i%keys)) }), keys, capacity-perKey)

	// The BACKLOG stream holds exactly the jobs answered queued.
	stored := afStreamIDs(t, c.nats.URL(), queue.StreamName("full", queue.Backlog))
	queued := map[string]bool{}
	perSubject := map[string]int{}
	admittedL := newLedger()
	for _, id := range l.ids() {
		switch a := l.accepted[id]; a.Reply.Status {
		case spillway.Queued:
			queued[id] = true
		case spillway.Admitted:
			admittedL.record(a)
		}
	}
	var dropped, extra int
	for id := range queued {
		if _, ok := stored[id]; !ok {
			dropped++
		}
	}
	for id, subj := range stored {
		perSubject[subj]++
		if !queued[id] {
			extra++
		}
	}
	for subj, n := range perSubject {
		if n > perKey {
			t.Errorf("subject %s holds %d jobs, above per_key_capacity %d", subj, n, perKey)
		}
	}
	if len(stored) != capacity || dropped != 0 || extra != 0 {
		t.Errorf("BACKLOG holds %d jobs (capacity %d): %d answered queued but not stored, %d stored but not answered queued", len(stored), capacity, dropped, extra)
	}

	// Counters: the admitters' decisions equal the ledger's answers.
	want := map[string]int{}
	for k, v := range p1 {
		want[k] += v
	}
	for k, v := range p2 {
		want[k] += v
	}
	got := afDecisions(t, client, c.admitters, "full")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("spillway_decisions_total{queue=full} on the admitters: %v; the ledger: %v", got, want)
	}
	// The admitted jobs ran; nothing else failed.
	r := settle(t, admittedL, c.hook, c.nats.URL(), "full", 60*time.Second)
	if r.Lost != 0 {
		t.Errorf("admitted jobs lost: %s", r)
	}
	if n := l.count(spillway.Failed); n != 0 {
		t.Errorf("%d submissions failed: %s", n, l)
	}
	t.Logf("ledger: %s", l)
	figure(t, "per-key backlog full (per_key_capacity %d, %d submissions of one key at once): %v", perKey, keyBurst, p1)
	figure(t, "backlog full (capacity %d, %d keys × %d at once): %v", capacity, keys, perKeyBurst, p2)
	figure(t, "BACKLOG stream holds %d = capacity %d; %d answered queued not stored (silent drops), %d stored not answered; decisions_total %v = ledger; admitted jobs: %s",
		len(stored), capacity, dropped, extra, got, r)
}

// ---------------------------------------------------------------------
// kill -9 of an admitter between the bucket decision and the
// publish.

// afProxy is a TCP proxy between one admitter and NATS. Server → client
// bytes always pass; client → server bytes pass until hold is set, then
// they are read (so the client's writes complete) and kept back: the
// admitter has sent its publish, NATS has not received it. dropHeld
// throws the kept bytes away, as a crash before the write would.
type afProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	hold     bool
	held     []byte
	conns    []net.Conn
	wg       sync.WaitGroup
}

func afStartProxy(t *testing.T, upstream string) *afProxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &afProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *afProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *afProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // server → client
			defer p.wg.Done()
			_, _ = io.Copy(c, u)
			_ = c.Close()
		}()
		go func() { // client → server, unless held
			defer p.wg.Done()
			defer u.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.mu.Lock()
					hold := p.hold
					if hold {
						p.held = append(p.held, buf[:n]...)
					}
					p.mu.Unlock()
					if !hold {
						if _, werr := u.Write(buf[:n]); werr != nil {
							return
						}
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *afProxy) setHold(h bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = h
}

// heldContains reports whether the kept-back bytes contain s.
func (p *afProxy) heldContains(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.held, []byte(s))
}

// dropHeld forgets the kept-back bytes and lets traffic pass again.
func (p *afProxy) dropHeld() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.held)
	p.held, p.hold = nil, false
	return n
}

func (p *afProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

const afCrashConfig = `
nats: {url: "%[1]s"}
# A decision's budget well above a loaded machine's stalls: these tests
# are about admission, not the store's failure mode (the Redis fault tests).
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 2s}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 16, grace_period: 5s}
queues:
  - name: crash
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: %[4]d, nodelay: true}
    backlog: {capacity: 1000, leak_rate: 100/s}
    handler: {http: {url: "%[3]s/crash", timeout: 5s}}
  - name: load
    limits:
      - {key: global, algorithm: leaky_bucket, rate: 100000/s, burst: 100000, nodelay: true}
    backlog: {capacity: 100000, leak_rate: 1000/s}
    handler: {http: {url: "%[3]s/load", timeout: 5s}}
`

// TestReliabilityKillAdmitterBeforePublish: an admitter
// talks to NATS through a proxy. Under load (queue load, recorded in the
// ledger), the proxy starts keeping the admitter's bytes back; a
// submission of a fresh key on queue crash is decided (its unit taken in
// Redis) and its publish sent — seen in the kept-back bytes — but never
// reaches JetStream; then the admitter is killed with SIGKILL and the
// kept bytes are dropped. Repeated scale(3, 20) times with a new
// admitter each time. Every job answered admitted or queued runs (0
// lost); the unit the crashed submission took without a stored job is
// found by draining the key's bucket through the other admitter: at most
// one per crash (there is no refund for a crash).
func TestReliabilityKillAdmitterBeforePublish(t *testing.T) {
	crashes := scale(3, 20)
	const bucketBurst = 5 // b+1 = 6 units per key
	c := afCluster(t, 1, 1, afCrashConfig, bucketBurst)
	client, _ := afClients(t, c)
	proxy := afStartProxy(t, strings.TrimPrefix(c.nats.URL(), "nats://"))
	victimCfg := writeFile(t, "victim.yaml", fmt.Sprintf(afCrashConfig, proxy.url(), c.redis.Addr(), c.hook.srv.URL, bucketBurst))
	survivor := c.admitters[0]
	l := newLedger()
	var leaked []int
	var loadAnswers, cutOff int
	for round := range crashes {
		victim := start(t, "victim"+strconv.Itoa(round), bins.admitter, "--config", victimCfg)
		// Load on the victim until the crash.
		var answered atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var failedLoad atomic.Int64
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a := submitHTTP(t, client, victim.addr, "load", nil, []byte(fmt.Sprintf("round %d caller %d job %d", round, g, i)))
					l.record(a)
					if a.Reply.Status == spillway.Admitted {
						answered.Add(1)
					} else {
						failedLoad.Add(1)
					}
					if a.Code == -1 {
						return // the victim is gone
					}
				}
			}()
		}
		waitFor(t, 30*time.Second, "answers from the victim", func() bool { return answered.Load() >= 50 })

		// Keep the victim's bytes back, submit the crash job, wait until
		// its publish is in the kept bytes: decided, not stored.
		key := fmt.Sprintf("crash-%d-%d", round, time.Now().UnixNano())
		proxy.setHold(true)
		crashAnswer := make(chan answer, 1)
		go func() {
			crashAnswer <- submitHTTP(t, client, victim.addr, "crash", map[string]string{"X-Client": key}, []byte("crash "+key))
		}()
		// READY's subject names the job, whose id is not known yet: its
		// publish is found by its key header.
		keyHeader := spillway.HeaderKey + ": " + key
		waitFor(t, 30*time.Second, "the crash job's publish to be sent", func() bool { return proxy.heldContains(keyHeader) })
		victim.kill()
		close(stop)
		wg.Wait()
		a := <-crashAnswer
		l.record(a)
		if a.Code != -1 {
			t.Errorf("round %d: the crash submission was answered %d %+v; want no answer (the admitter was killed)", round, a.Code, a.Reply)
		}
		dropped := proxy.dropHeld()
		loadAnswers += int(answered.Load())
		cutOff += int(failedLoad.Load())

		// Drain the key's bucket through the survivor.
		got := 0
		for range bucketBurst + 2 {
			p := submitHTTP(t, client, survivor.addr, "crash", map[string]string{"X-Client": key}, []byte("probe "+key))
			l.record(p)
			if p.Reply.Status != spillway.Admitted {
				break
			}
			got++
		}
		n := bucketBurst + 1 - got
		leaked = append(leaked, n)
		t.Logf("round %d: %d load jobs answered, %d cut off; %d bytes kept back and dropped; key's bucket: %d of %d units left → %d taken without a job",
			round, answered.Load(), failedLoad.Load(), dropped, got, bucketBurst+1, n)
	}

	r := settle(t, l, c.hook, c.nats.URL(), "load", 90*time.Second)
	// Probes of queue crash are in the same ledger; settle waits for all.
	total, worst := 0, 0
	for _, n := range leaked {
		total += n
		worst = max(worst, n)
	}
	t.Logf("ledger: %s; %s", l, r)
	figure(t, "%d kills -9 between decision and publish: %d answered jobs lost of %d (%d load answers; %d load submissions cut off unanswered)", crashes, r.Lost, r.Accepted, loadAnswers, cutOff)
	figure(t, "units taken without a stored job: %v per crash (total %d, worst %d, %.2f per crash; no refund)", leaked, total, worst, float64(total)/float64(crashes))
	if r.Lost != 0 {
		t.Errorf("%d answered jobs lost: %v", r.Lost, r.LostIDs)
	}
	if worst > 1 {
		t.Errorf("a crash took %d units without a job, want ≤ 1", worst)
	}
}

// ---------------------------------------------------------------------
// config reload under load.

const afReloadConfig = `
nats: {url: "%[1]s"}
# A decision's budget well above a loaded machine's stalls: these tests
# are about admission, not the store's failure mode (the Redis fault tests).
redis: {url: "redis://%[2]s/0", failure_mode: open, timeout: 2s}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 32, grace_period: 5s}
queues:
  - name: load
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 50/s, burst: 20, delay: 10}
    backlog: {capacity: 100000, per_key_capacity: 1000, leak_rate: 2000/s}
    handler: {http: {url: "%[3]s/load", timeout: 5s}}
  - name: probe
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: %[4]d, nodelay: true}
    backlog: {capacity: 100, leak_rate: 10/s}
    handler: {http: {url: "%[3]s/probe", timeout: 5s}}
%[5]s`

// afExtraQueue is a queue a reload adds.
const afExtraQueue = `
  - name: %s
    limits:
      - {key: global, algorithm: token_bucket, rate: 1000/s, burst: 1000}
    backlog: {capacity: 1000, leak_rate: 100/s}
    handler: {http: {url: "%s/extra", timeout: 5s}}
`

// TestReliabilityConfigReloadUnderLoad: two admitters
// (Redis store) read one file while 8 producers submit without pause
// through both doors. Each cycle: a valid file (new probe burst, one more
// queue) → applied by both admitters, counted success, the new limit
// enforced and the new queue taking jobs; an invalid file → counted
// failure, the running limit kept; a valid file and SIGHUP → applied.
// Throughout: no submission fails (no 5xx, no transport error, no error
// answer on NATS), and every accepted job runs.
func TestReliabilityConfigReloadUnderLoad(t *testing.T) {
	cycles := scale(1, 10)
	c := afCluster(t, 2, 2, afReloadConfig, 2, "")
	client, nc := afClients(t, c)
	write := func(content string) {
		t.Helper()
		tmp := c.config + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, c.config); err != nil { // as editors do
			t.Fatal(err)
		}
	}
	extras := ""
	file := func(probeBurst int) string {
		return fmt.Sprintf(afReloadConfig, c.nats.URL(), c.redis.Addr(), c.hook.srv.URL, probeBurst, extras)
	}
	reloads := func(result string) []int {
		var n []int
		for _, a := range c.admitters {
			n = append(n, afReloads(t, client, a, result))
		}
		return n
	}
	waitReload := func(result string, before []int) {
		t.Helper()
		waitFor(t, 30*time.Second, "a "+result+" reload on both admitters", func() bool {
			now := reloads(result)
			return now[0] > before[0] && now[1] > before[1]
		})
	}
	l := newLedger()
	probeKey := 0
	// probe: a fresh client's burst on each admitter; burst+1 admitted.
	probe := func(what string, want int) {
		t.Helper()
		for i, a := range c.admitters {
			probeKey++
			h := map[string]string{"X-Client": "probe-" + strconv.Itoa(probeKey)}
			n := 0
			for range want + 3 {
				p := submitHTTP(t, client, a.addr, "probe", h, []byte("probe"))
				l.record(p)
				if p.Reply.Status == spillway.Admitted {
					n++
				}
			}
			if n != want {
				t.Errorf("%s: admitter %d admitted %d of a fresh client's burst, want %d", what, i, n, want)
			}
		}
	}

	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var extraQueues sync.Map // queues added by a reload, now taking jobs
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := "load"
				if i%4 == 3 { // every fourth to a queue a reload added
					var added []string
					extraQueues.Range(func(k, _ any) bool { added = append(added, k.(string)); return true })
					if len(added) > 0 {
						q = added[(i/4)%len(added)]
					}
				}
				h := map[string]string{"X-Client": "load-" + strconv.Itoa(g*10+i%10)}
				l.record(afSubmit(t, c, client, nc, g+i, q, h, []byte("load")))
				sent.Add(1)
			}
		}()
	}
	begin := time.Now()
	probe("before any reload (burst 2)", 3)
	var applied, refused int
	for cycle := range cycles {
		b := 4 + cycle
		name := "extra" + strconv.Itoa(cycle)
		extras += fmt.Sprintf(afExtraQueue, name, c.hook.srv.URL)
		before := reloads("success")
		write(file(b))
		waitReload("success", before)
		applied++
		probe(fmt.Sprintf("cycle %d: file changed to burst %d", cycle, b), b+1)
		if a := submitHTTP(t, client, c.admitters[cycle%2].addr, name, nil, []byte("first")); a.Reply.Status != spillway.Admitted {
			t.Errorf("cycle %d: the added queue %s answered %d %+v", cycle, name, a.Code, a.Reply)
		} else {
			l.record(a)
		}
		extraQueues.Store(name, true)

		before = reloads("failure")
		write("queues: [{name: load, limits: [{key: global, rate: ten}]}]\n")
		waitReload("failure", before)
		refused++
		probe(fmt.Sprintf("cycle %d: invalid file", cycle), b+1)

		before = reloads("success")
		b2 := 2 + cycle%3
		write(file(b2))
		for _, a := range c.admitters {
			a.signal(syscall.SIGHUP)
		}
		waitReload("success", before)
		applied++
		probe(fmt.Sprintf("cycle %d: SIGHUP with burst %d", cycle, b2), b2+1)
	}
	close(stop)
	wg.Wait()
	took := time.Since(begin)

	// Workers reload too: the jobs of the queues a reload added run
	// without a worker restart.
	waitFor(t, 60*time.Second, "every accepted job, of every queue, to run", func() bool {
		e := c.hook.executions()
		for _, id := range l.ids() {
			if !e.succeeded[id] {
				return false
			}
		}
		return true
	})
	added := map[string]int{}
	for _, id := range l.ids() {
		if q := l.accepted[id].Reply.Queue; q != "load" && q != "probe" {
			added[q]++
		}
	}
	r := settle(t, l, c.hook, c.nats.URL(), "load", 120*time.Second)
	ok, bad := reloads("success"), reloads("failure")
	t.Logf("ledger: %s; %s", l, r)
	failed := l.count(spillway.Failed)
	codes := map[int]int{}
	l.mu.Lock()
	for code, n := range l.codes {
		codes[code] = n
	}
	problems := fmt.Sprint(l.problems)
	l.mu.Unlock()
	serverErrors := 0
	for code, n := range codes {
		if code >= 500 || code == -1 {
			serverErrors += n
		}
	}
	figure(t, "%d submissions over %v (%.0f/s, both doors) during %d applied and %d refused reloads: %d failed (%d 5xx or transport errors); %s",
		sent.Load(), took.Round(time.Millisecond), float64(sent.Load())/took.Seconds(), applied, refused, failed, serverErrors, l.String())
	figure(t, "spillway_config_reloads_total per admitter: success %v, failure %v; new limits applied and old ones kept at every probe; %s", ok, bad, r)
	figure(t, "workers reload: the accepted jobs of the %d queues added by reloads all ran, no worker restarted (%v)", len(added), added)
	if failed != 0 || serverErrors != 0 {
		t.Errorf("%d submissions failed during reloads (HTTP codes %v, refusals %s)", failed, codes, problems)
	}
	if r.Lost != 0 {
		t.Errorf("%d accepted jobs lost: %v", r.Lost, r.LostIDs)
	}
	for i := range c.admitters {
		if ok[i] < applied || bad[i] < refused {
			t.Errorf("admitter %d counted %d successful and %d failed reloads, want ≥ %d and ≥ %d", i, ok[i], bad[i], applied, refused)
		}
	}
}
