package door_test

// The reliability suite (docs/reliability.md), its input cases at the front
// doors: a spoofed X-Forwarded-For, hostile input on both doors, and a
// missing or bad API key (which takes nothing from any bucket).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/logtest"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func inFull() bool { return os.Getenv("SPILLWAY_RELIABILITY") == "full" }

func inScale(short, long int) int {
	if inFull() {
		return long
	}
	return short
}

// inCountingStore is a memory store that counts the decisions it takes,
// by tier key: what a request made the store do.
type inCountingStore struct {
	*bucket.Memory
	mu    sync.Mutex
	byKey map[string]int
	total atomic.Int64
}

func newInCountingStore(t *testing.T) (*inCountingStore, *admit.Failover) {
	t.Helper()
	m, err := bucket.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	s := &inCountingStore{Memory: m, byKey: map[string]int{}}
	f, err := admit.NewFailover(s, config.FailClosed)
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func (s *inCountingStore) Decide(ctx context.Context, group string, tiers []bucket.Tier, cost int64) (bucket.Decision, error) {
	s.total.Add(1)
	s.mu.Lock()
	for _, tier := range tiers {
		s.byKey[tier.Key]++
	}
	s.mu.Unlock()
	return s.Memory.Decide(ctx, group, tiers, cost)
}

func (s *inCountingStore) keys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.byKey))
	for k, n := range s.byKey {
		out[k] = n
	}
	return out
}

// inFigure logs one measured figure for docs/reliability.md.
func inFigure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("figure: %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

// inParallel runs f(i) for i in [0, n) on workers goroutines.
func inParallel(n, workers int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

// inSpoof is the i-th forged client-address header set: X-Forwarded-For
// of every shape (a random address, chains, addresses inside the trusted
// range, IPv6, garbage, many lines) and the other headers proxies use.
func inSpoof(i int, rng *rand.Rand) []string {
	a := func() string {
		return fmt.Sprintf("%d.%d.%d.%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
	}
	switch i % 10 {
	case 0:
		return []string{"X-Forwarded-For", a()}
	case 1:
		return []string{"X-Forwarded-For", a() + ", " + a() + ", " + a()}
	case 2: // ends in the trusted range, as if a trusted proxy had added it
		return []string{"X-Forwarded-For", a() + ", 10.0.0." + strconv.Itoa(1+rng.IntN(254))}
	case 3:
		return []string{"X-Forwarded-For", a(), "X-Forwarded-For", "10.1.2.3"}
	case 4:
		return []string{"X-Forwarded-For", fmt.Sprintf("2001:db8:%x::%x", rng.IntN(1<<16), rng.IntN(1<<16))}
	case 5:
		return []string{"Forwarded", "for=" + a() + ";proto=https", "X-Real-IP", a()}
	case 6:
		return []string{"True-Client-IP", a(), "CF-Connecting-IP", a(), "X-Client-IP", a()}
	case 7:
		return []string{"X-Forwarded-For", "::ffff:" + a()}
	case 8:
		return []string{"X-Forwarded-For", strings.Repeat(a()+",", 200) + a()}
	default:
		return []string{"X-Forwarded-For", "unknown, " + a() + ":443, _hidden"}
	}
}

// TestReliabilitySpoofedForwardedFor: thousands of submissions from one
// untrusted peer (127.0.0.1; the trusted proxies are 10.0.0.0/8), each
// with a different forged client address, over the network, 8 at a time.
// The ip tier grants 5 jobs a key. Exactly 5 are accepted (0 bypasses),
// every decision was taken on the peer's own key, the store holds one key,
// and JetStream one subject. Then behind a trusted proxy (127.0.0.1 is
// one) that appends the real client to what the client forged: every job
// is the real client's, again 5 accepted.
func TestReliabilitySpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	n := inScale(1000, 20000)
	const quota = 5
	const queues = `
queues:
  - name: q
    limits: [{key: ip, algorithm: leaky_bucket, rate: 1/h, burst: 4, nodelay: true}]
    backlog: {capacity: 10, leak_rate: 1/s}
`
	for _, c := range []struct {
		name, trusted, client string
		// forge returns the headers of request i.
		forge func(i int, rng *rand.Rand) []string
	}{
		{"untrusted peer", "[10.0.0.0/8]", "127.0.0.1", inSpoof},
		{"behind a trusted proxy", "[127.0.0.1, 10.0.0.0/8]", "198.51.100.7", func(i int, rng *rand.Rand) []string {
			// What the client sent, with the proxy's own append.
			h := inSpoof(i, rng)
			for j := 0; j+1 < len(h); j += 2 {
				if h[j] == "X-Forwarded-For" {
					h[j+1] += ", 198.51.100.7"
					return h
				}
			}
			return append(h, "X-Forwarded-For", "198.51.100.7")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, failover := newInCountingStore(t)
			b := setup(t, "http: {trusted_proxies: "+c.trusted+"}\n"+queues, setupOptions{store: failover})
			codes := map[int]int{}
			var mu sync.Mutex
			inParallel(n, 8, func(i int) {
				rng := rand.New(rand.NewPCG(uint64(i), 16))
				r := b.post(t, "q", nil, c.forge(i, rng)...)
				mu.Lock()
				codes[r.code]++
				mu.Unlock()
				if r.code != http.StatusAccepted && (r.code != http.StatusTooManyRequests || r.problem.Type != spillway.ProblemRateLimited) {
					t.Errorf("spoof %d: %d %s, want 202 or 429 %s", i, r.code, r.body, spillway.ProblemRateLimited)
				}
			})
			keys := store.keys()
			want := "0:" + queue.KeyToken(c.client)
			bypasses := codes[http.StatusAccepted] - quota
			st := store.Stats()
			inFigure(t, "%d submissions with forged client addresses: %d accepted (quota %d, %d bypasses), %d rate-limited; %d decisions on %d bucket key(s), %d key(s) in the store",
				n, codes[http.StatusAccepted], quota, bypasses, codes[http.StatusTooManyRequests], store.total.Load(), len(keys), st.Keys)
			if codes[http.StatusAccepted] != quota {
				t.Errorf("%d of %d forged submissions accepted, want exactly %d", codes[http.StatusAccepted], n, quota)
			}
			if len(keys) != 1 || keys[want] != n || st.Keys != 1 {
				t.Errorf("decisions by bucket key %v (%d keys in the store), want all %d on %s (%s)", keys, st.Keys, n, want, c.client)
			}
			s, err := b.JS.Stream(context.Background(), queue.StreamName("q", queue.Ready))
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// READY's subjects name the jobs; each job's key is in its headers.
			byKey := map[string]int{}
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
				m, err := s.GetMsg(context.Background(), seq)
				if err != nil {
					t.Fatal(err)
				}
				byKey[m.Header.Get(spillway.HeaderKey)]++
			}
			if len(byKey) != 1 || byKey[c.client] != quota {
				t.Errorf("READY jobs by key %v, want %d jobs of %s only", byKey, quota, c.client)
			}
		})
	}
}

// inCountingListener counts the bytes the server reads off its connections.
type inCountingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *inCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &inCountingConn{Conn: c, read: &l.read}, nil
}

type inCountingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *inCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// inEndless is a body of zeros that never ends, counting what was read.
type inEndless struct{ n atomic.Int64 }

func (e *inEndless) Read(p []byte) (int, error) {
	clear(p)
	e.n.Add(int64(len(p)))
	return len(p), nil
}

// inHostileConfig: a 4 KiB body limit; per X-Client, every job after a
// key's first is queued, so each key's job reaches the backlog under the
// key's subject.
const inHostileConfig = `
http: {max_body_bytes: 4096}
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 5}]
    backlog: {capacity: 100000, per_key_capacity: 1, leak_rate: 1/s}
`

// inHostileKeys are client keys no subject may hold raw: NATS syntax,
// blanks, control bytes, invalid UTF-8, the longest key, and random bytes.
func inHostileKeys(n int, nul bool) []string {
	keys := []string{".", "..", "*", ">", "a.*.>", "a b", "a\tb", "\xff\xfe\xfd", "é.*>", "$JS.API.>", "_INBOX.x",
		strings.Repeat(".", admit.MaxKeyLen), strings.Repeat("\xff", admit.MaxKeyLen)}
	if nul {
		keys = append(keys, "\x00", "a\x00b", "\x01\x02\x7f")
	}
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k] = true
	}
	rng := rand.New(rand.NewPCG(17, 6))
	for len(keys) < n {
		k := make([]byte, 1+rng.IntN(64))
		for i := range k {
			k[i] = byte(rng.IntN(256))
			// What a header value cannot carry: CR, LF, and (HTTP) NUL and
			// other controls; blanks at the ends are trimmed in transit.
			for k[i] == '\r' || k[i] == '\n' || (!nul && (k[i] < 0x20 && k[i] != '\t' || k[i] == 0x7f)) {
				k[i] = byte(rng.IntN(256))
			}
		}
		s := strings.Trim(string(k), " \t")
		if s != "" && !seen[s] {
			seen[s] = true
			keys = append(keys, s)
		}
	}
	return keys
}

// inCheckBacklogSubjects checks that every subject of the backlog is
// spillway.backlog.q.<key token> and that the keys' jobs are there, raw
// key in the job's header.
func inCheckBacklogSubjects(t *testing.T, b *testBundle, keys []string) int {
	t.Helper()
	s, err := b.JS.Stream(context.Background(), queue.StreamName("q", queue.Backlog))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstreamSubjects())
	if err != nil {
		t.Fatal(err)
	}
	for subj := range info.State.Subjects {
		token, ok := strings.CutPrefix(subj, "spillway.backlog.q.")
		if !ok || !subjectToken(token) {
			t.Errorf("backlog subject %q: want spillway.backlog.q.<26 of [a-z2-7]>", subj)
		}
	}
	if len(info.State.Subjects) != len(keys) {
		t.Errorf("the backlog has %d subjects for %d keys", len(info.State.Subjects), len(keys))
	}
	for _, k := range keys[:min(len(keys), 20)] {
		if j, ok := b.jobOfKey(t, "q", queue.Backlog, k); !ok || j.Key != k {
			t.Errorf("the job of key %q: %+v (found %v), want the raw key in its header", k, j, ok)
		}
	}
	return len(info.State.Subjects)
}

// TestReliabilityHostileInputHTTP sends the HTTP door what a hostile client
// would: bodies over the limit (announced, chunked, endless), every kind of
// bad Spillway-Cost, keys and idempotency keys too long, unknown queues
// and job ids of every shape, a body at the limit (which must fit in a
// JetStream message), and hundreds of hostile keys. Each answer is the
// expected status with a stable problem type; the server's own log shows
// no panic; the bytes it read of each oversized body stay within the
// limit plus its read buffer; no subject holds a raw key.
func TestReliabilityHostileInputHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, inHostileConfig, setupOptions{})
	const limit = 4096
	ln := &inCountingListener{Listener: newLocalListener(t)}
	srv := httptest.NewUnstartedServer(b.handler)
	srv.Listener = ln
	errLog := &logtest.Buffer{}
	srv.Config.ErrorLog = log.New(errLog, "", 0)
	srv.Config.MaxHeaderBytes = 64 << 10 // as admitterd sets it
	srv.Start()
	t.Cleanup(srv.Close)
	client := apitest.Client(t, srv.Client())

	send := func(method, path string, body io.Reader, length int64, header ...string) response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return readResponse(t, resp)
	}
	types := map[string]int{}
	check := func(what string, r response, code int, typ string) {
		t.Helper()
		types[fmt.Sprintf("%d %s", r.code, strings.TrimPrefix(r.problem.Type, "https://spillway.dev/problems/"))]++
		if r.code != code || (typ != "" && r.problem.Type != typ) {
			t.Errorf("%s: %d %s, want %d %s", what, r.code, r.body, code, typ)
		}
	}

	// Oversized bodies: what the server read off the connection.
	var maxRead int64
	for _, c := range []struct {
		name   string
		length int64 // -1: chunked
	}{{"announced 1 GiB", 1 << 30}, {"announced 4097 B", limit + 1}, {"chunked, endless", -1}} {
		body := &inEndless{}
		var r io.Reader = body
		if c.length > 0 {
			r = io.LimitReader(body, c.length)
		}
		before := ln.read.Load()
		resp := send(http.MethodPost, "/v1/queues/q/jobs", r, c.length, "X-Client", "big")
		read := ln.read.Load() - before
		maxRead = max(maxRead, read)
		check(c.name, resp, http.StatusRequestEntityTooLarge, spillway.ProblemTooLarge)
		// The door reads at most limit+1 bytes (below). Go's server reads
		// in 4 KiB buffers and, after the answer, discards up to 256 KiB
		// of a chunked body through one buffer, hoping to reuse the
		// connection: read, never kept.
		if read > limit+(256+8)<<10 {
			t.Errorf("%s: the server read %d bytes off the connection (the client offered %d), want ≤ the limit %d + 264 KiB", c.name, read, body.n.Load(), limit)
		}
		t.Logf("%s: the server read %d bytes; the client wrote %d", c.name, read, body.n.Load())
	}

	// What the door itself reads of an endless body: at most limit+1.
	endless := &inEndless{}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/queues/q/jobs", endless)
	req.ContentLength = -1
	req.Header.Set("X-Client", "endless")
	check("an endless body, in process", b.serve(t, req), http.StatusRequestEntityTooLarge, spillway.ProblemTooLarge)
	if endless.n.Load() > limit+1 {
		t.Errorf("the door read %d bytes of an endless body, want ≤ %d", endless.n.Load(), limit+1)
	}

	for _, cost := range []string{"0", "-1", "abc", "1.5", "1e3", "0x10", "１", "9223372036854775808", "99999999999999999999", "7", "2 3", "\xff"} {
		check("Spillway-Cost "+strconv.Quote(cost), send(http.MethodPost, "/v1/queues/q/jobs", nil, 0, "X-Client", "c", spillway.HeaderCost, cost), http.StatusBadRequest, spillway.ProblemBadCost)
	}
	check("a key of MaxKeyLen+1 bytes", send(http.MethodPost, "/v1/queues/q/jobs", nil, 0, "X-Client", strings.Repeat("k", admit.MaxKeyLen+1)), http.StatusBadRequest, spillway.ProblemBadKey)
	check("a key of 32 KiB", send(http.MethodPost, "/v1/queues/q/jobs", nil, 0, "X-Client", strings.Repeat("k", 32<<10)), http.StatusBadRequest, spillway.ProblemBadKey)
	check("an idempotency key too long", send(http.MethodPost, "/v1/queues/q/jobs", nil, 0, "X-Client", "c", spillway.HeaderIdempotencyKey, strings.Repeat("i", admit.MaxIdempotencyKeyLen+1)), http.StatusBadRequest, spillway.ProblemBadRequest)
	for _, q := range []string{"nope", "Q", "..", "%2e%2e", "a.b", "*", "%3E", "%00", "a%2Fb", "%FF", strings.Repeat("q", 10000)} {
		check("queue "+q, send(http.MethodPost, "/v1/queues/"+q+"/jobs", strings.NewReader("x"), 1), http.StatusNotFound, spillway.ProblemNotFound)
		check("GET queue "+q, send(http.MethodGet, "/v1/queues/"+q, nil, 0), http.StatusNotFound, spillway.ProblemNotFound)
	}
	for _, id := range []string{"x", "*", ">", "a.b", "%00", "%FF", strings.Repeat("0", 4096), "01a209be-09a0-7341-a4e7-164ab9ce072d%00"} {
		check("job id "+id[:min(len(id), 40)], send(http.MethodGet, "/v1/jobs/"+id, nil, 0), http.StatusBadRequest, spillway.ProblemBadRequest)
	}
	check("PUT a job", send(http.MethodPut, "/v1/queues/q/jobs", nil, 0), http.StatusMethodNotAllowed, spillway.ProblemMethodNotAllowed)
	// Headers a job ignores or drops, however large: the job is taken.
	check("a 16 KiB traceparent and 1,000 other headers", send(http.MethodPost, "/v1/queues/q/jobs", nil, 0,
		append([]string{"X-Client", "ignored-headers", "traceparent", strings.Repeat("0", 16<<10)}, inManyHeaders(1000)...)...), http.StatusAccepted, "")
	// A body at the limit must fit in the job's JetStream message.
	atLimit := send(http.MethodPost, "/v1/queues/q/jobs", bytes.NewReader(make([]byte, limit)), limit, "X-Client", "at-limit")
	check("a body of max_body_bytes", atLimit, http.StatusAccepted, "")
	// With the default limit, 1 MiB, which is also NATS's default
	// max_payload, a body at the limit does not leave room for the job's
	// headers: too large, and its units given back — not a 503 that a
	// client would retry forever.
	def := setup(t, `
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 0}]
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	check("a body of the default max_body_bytes, 1 MiB", def.post(t, "q", make([]byte, config.DefaultMaxBodyBytes), "X-Client", "mib"), http.StatusRequestEntityTooLarge, spillway.ProblemTooLarge)
	check("then a small job of that key (burst 0)", def.post(t, "q", nil, "X-Client", "mib"), http.StatusAccepted, "")

	keys := inHostileKeys(inScale(300, 5000), false)
	var bad atomic.Int64
	inParallel(len(keys), 8, func(i int) {
		for _, want := range []spillway.Status{spillway.Admitted, spillway.Queued} {
			if r := b.post(t, "q", nil, "X-Client", keys[i]); r.code != http.StatusAccepted || r.reply.Status != want {
				bad.Add(1)
				t.Errorf("key %q: %d %s, want %s", keys[i], r.code, r.body, want)
			}
		}
	})
	// What Go's server refuses before the door sees it (plain text, not
	// problem+json: the request never was one): NUL in a header value,
	// headers over MaxHeaderBytes, a broken request line.
	for _, c := range []struct {
		name, req string
		code      string
	}{
		{"NUL in X-Client", "POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\nX-Client: a\x00b\r\nContent-Length: 0\r\n\r\n", "400"},
		{"100 KiB of headers", "POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\nX-Client: " + strings.Repeat("k", 100<<10) + "\r\nContent-Length: 0\r\n\r\n", "431"},
		{"a broken request line", "POST /v1/queues/q/jobs\r\n\r\n", "400"},
	} {
		status := inRaw(t, ln.Addr().String(), c.req)
		types[status]++
		if !strings.HasPrefix(status, "HTTP/1.1 "+c.code) {
			t.Errorf("%s: %q, want %s", c.name, status, c.code)
		}
	}

	// Only the hostile keys' second jobs are in the backlog.
	subjects := inCheckBacklogSubjects(t, b, keys)
	panics := strings.Count(errLog.String(), "panic")
	inFigure(t, "answers by status and problem type %v; %d hostile keys × 2 jobs: %d wrong answers, %d backlog subjects, all key tokens; oversized bodies: the door read at most %d bytes (limit %d), the server at most %d bytes off the connection; %d panics in the server log",
		types, len(keys), bad.Load(), subjects, endless.n.Load(), limit, maxRead, panics)
	if panics > 0 {
		t.Errorf("the HTTP server logged a panic:\n%s", errLog.String())
	}
}

// inRaw writes req on a new connection to addr and returns the status
// line of the answer.
func inRaw(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer to %.60q: %v", req, err)
	}
	return strings.TrimSpace(line)
}

func inManyHeaders(n int) []string {
	h := make([]string, 0, 2*n)
	for i := range n {
		h = append(h, "X-Junk-"+strconv.Itoa(i), strings.Repeat("j", 16))
	}
	return h
}

func newLocalListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestReliabilityHostileInputNATS does the same over NATS: bad costs,
// unknown queues, keys and idempotency keys too long, headers by the
// hundred kilobytes and by the thousand, a payload as large as the
// server's max_payload allows, and hundreds of hostile keys — NUL and
// control bytes included, which NATS headers carry. Every request is
// answered with the expected status and problem type (a panic would end
// the test binary), and no subject holds a raw key.
func TestReliabilityHostileInputNATS(t *testing.T) {
	t.Parallel()
	b := setup(t, inHostileConfig, setupOptions{})
	nc := b.nats.Connect(t)
	types := map[string]int{}
	check := func(what string, m *nats.Msg, status spillway.Status, typ string) {
		t.Helper()
		rep := ask(t, nc, m)
		types[fmt.Sprintf("%s %s", rep.Status, strings.TrimPrefix(rep.Type, "https://spillway.dev/problems/"))]++
		if rep.Status != status || rep.Type != typ || (status == spillway.Failed && rep.Error == "") {
			t.Errorf("%s: %+v, want %s %s", what, rep, status, typ)
		}
	}
	for _, cost := range []string{"0", "-1", "abc", "1.5", "1e3", "0x10", "１", "9223372036854775808", "7", "2 3", "\xff", "\x00"} {
		check("Spillway-Cost "+strconv.Quote(cost), natsMsg("q", nil, "X-Client", "c", spillway.HeaderCost, cost), spillway.Failed, spillway.ProblemBadCost)
	}
	check("a key of MaxKeyLen+1 bytes", natsMsg("q", nil, "X-Client", strings.Repeat("k", admit.MaxKeyLen+1)), spillway.Failed, spillway.ProblemBadKey)
	check("a key of 512 KiB", natsMsg("q", nil, "X-Client", strings.Repeat("k", 512<<10)), spillway.Failed, spillway.ProblemBadKey)
	check("an idempotency key of 512 KiB", natsMsg("q", nil, "X-Client", "c", spillway.HeaderIdempotencyKey, strings.Repeat("i", 512<<10)), spillway.Failed, spillway.ProblemBadRequest)
	check("a Nats-Msg-Id of 512 KiB", natsMsg("q", nil, "X-Client", "c", spillway.HeaderMsgID, strings.Repeat("i", 512<<10)), spillway.Failed, spillway.ProblemBadRequest)
	// (A subject longer than the server's control line, 4 KiB, closes
	// the producer's own connection before anything reaches an admitter.)
	for _, q := range []string{"nope", "Q", "$JS", strings.Repeat("q", 3900), "\xff", "é"} {
		check("queue "+q[:min(len(q), 20)], natsMsg(q, nil), spillway.Failed, spillway.ProblemNotFound)
	}
	check("a 512 KiB traceparent and 5,000 other headers", natsMsg("q", nil,
		append([]string{"X-Client", "ignored-headers", "traceparent", strings.Repeat("0", 512<<10)}, inManyHeaders(5000)...)...), spillway.Admitted, "")
	check("a 512 KiB traceparent and 5,000 other headers, again", natsMsg("q", nil,
		append([]string{"X-Client", "ignored-headers", "traceparent", strings.Repeat("0", 512<<10)}, inManyHeaders(5000)...)...), spillway.Queued, "")
	// The largest request the server takes: its payload alone does not
	// leave room for the job's own headers in a JetStream message.
	maxPayload := int(nc.MaxPayload())
	check("a payload of max_payload − 64 bytes", natsMsg("q", make([]byte, maxPayload-64), "X-Client", "huge"), spillway.Failed, spillway.ProblemTooLarge)
	check("then a small job of that key", natsMsg("q", nil, "X-Client", "huge"), spillway.Admitted, "")

	keys := inHostileKeys(inScale(300, 5000), true)
	var bad atomic.Int64
	inParallel(len(keys), 8, func(i int) {
		for _, want := range []spillway.Status{spillway.Admitted, spillway.Queued} {
			if rep := ask(t, nc, natsMsg("q", nil, "X-Client", keys[i])); rep.Status != want {
				bad.Add(1)
				t.Errorf("key %q: %+v, want %s", keys[i], rep, want)
			}
		}
	})
	subjects := inCheckBacklogSubjects(t, b, append(keys, "ignored-headers"))
	inFigure(t, "answers by status and problem type %v; %d hostile keys × 2 jobs: %d wrong answers, %d backlog subjects, all key tokens; 0 panics (the binary lives)",
		types, len(keys), bad.Load(), subjects)
}

// TestReliabilityAuthTouchesNoBucket: with API keys configured, submissions
// without a key or with a bad one — missing, wrong, truncated, extended,
// another case, another scheme, blanks, huge — over the network, 8 at a
// time, are all 401 with WWW-Authenticate, and the store took not one
// decision; JetStream holds no job. One good key then takes one decision:
// the count would see a 401 that reached the store.
func TestReliabilityAuthTouchesNoBucket(t *testing.T) {
	t.Parallel()
	n := inScale(1000, 20000)
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	store, failover := newInCountingStore(t)
	b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2}
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 100}
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{keys: keys, store: failover})
	bad := [][]string{
		nil,
		{"Authorization", "Bearer wrong-key-0123456789"},
		{"Authorization", "Bearer " + testKey + "x"},
		{"Authorization", "Bearer " + testKey[:len(testKey)-1]},
		{"Authorization", "Bearer " + strings.ToUpper(testKey)},
		{"Authorization", "Bearer  " + testKey},
		{"Authorization", "Bearer"},
		{"Authorization", "Basic " + testKey},
		{"Authorization", testKey},
		{"Authorization", "Bearer " + strings.Repeat("k", 32<<10)},
		{"X-Api-Key", ""},
		{"X-Api-Key", "wrong-key-0123456789"},
		{"X-Api-Key", testKey + " x"},
		{"X-Api-Key", "\xff" + testKey},
		{"Authorization", "Bearer wrong-key-0123456789", "X-Api-Key", testKey},
	}
	var wrong atomic.Int64
	inParallel(n, 8, func(i int) {
		h := append([]string{"X-Client", "client-" + strconv.Itoa(i)}, bad[i%len(bad)]...)
		r := b.post(t, "q", []byte("x"), h...)
		if r.code != http.StatusUnauthorized || r.problem.Type != spillway.ProblemUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			wrong.Add(1)
			t.Errorf("POST with %q: %d %s, want 401 %s with WWW-Authenticate", bad[i%len(bad)], r.code, r.body, spillway.ProblemUnauthorized)
		}
	})
	decisions, stKeys := store.total.Load(), store.Stats().Keys
	jobs := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog)
	if r := b.post(t, "q", []byte("x"), "X-Client", "good", "Authorization", "Bearer "+testKey); r.code != http.StatusAccepted {
		t.Fatalf("a good key: %d %s", r.code, r.body)
	}
	inFigure(t, "%d submissions with a missing or bad API key (%d shapes): %d not 401; the store took %d decisions and holds %d keys, JetStream %d jobs; one good key then: %d decision",
		n, len(bad), wrong.Load(), decisions, stKeys, jobs, store.total.Load()-decisions)
	if decisions != 0 || stKeys != 0 || jobs != 0 {
		t.Errorf("after %d unauthorized submissions the store took %d decisions (%v) and holds %d keys; JetStream holds %d jobs; want none", n, decisions, store.keys(), stKeys, jobs)
	}
	if got := store.total.Load() - decisions; got != 1 {
		t.Errorf("an authorized submission took %d decisions, want 1 (the count is blind)", got)
	}
}
