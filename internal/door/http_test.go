package door_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// basicConfig: per X-Client, rate 1/m (nothing leaks out during a test),
// burst 2 of which 1 starts at once: a key's jobs go admitted, queued,
// queued, rejected. The backlog takes 3 jobs, 2 per key.
const basicConfig = `
http: {max_body_bytes: 64}
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2, delay: 0}
    backlog: {capacity: 3, per_key_capacity: 2, leak_rate: 1/m}
`

func TestHTTPAdmittedAndQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	r := b.post(t, "q", []byte("payload one"), "X-Client", "c", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if r.code != http.StatusAccepted || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("admitted: %d %s %s, want 202 application/json", r.code, r.header.Get("Content-Type"), r.body)
	}
	rep := r.reply
	if rep.Status != spillway.Admitted || rep.Queue != "q" || rep.ID == "" || rep.Duplicate || rep.NotBefore != nil || rep.Position != 0 {
		t.Errorf("admitted: %s", r.body)
	}
	if got := r.header.Get("Location"); got != "/v1/jobs/"+rep.ID {
		t.Errorf("Location %q, want /v1/jobs/%s", got, rep.ID)
	}
	if got := r.header.Get(spillway.HeaderStatus); got != "admitted" {
		t.Errorf("%s %q, want admitted", spillway.HeaderStatus, got)
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on a 202", r.header.Get("Retry-After"))
	}
	j, ok := b.jobOfKey(t, "q", queue.Ready, "c")
	if !ok || j.ID != rep.ID || string(j.Payload) != "payload one" || j.Key != "c" || j.Cost != 1 || j.Header.Get("traceparent") == "" {
		t.Errorf("the stored job: %+v (found %v); want id %s, the payload, key c, cost 1 and the traceparent", j, ok, rep.ID)
	}

	before := time.Now()
	r = b.post(t, "q", []byte("payload two"), "X-Client", "c")
	rep = r.reply
	if r.code != http.StatusAccepted || rep.Status != spillway.Queued || r.header.Get(spillway.HeaderStatus) != "queued" {
		t.Fatalf("queued: %d %s", r.code, r.body)
	}
	if r.header.Get("Location") != "/v1/jobs/"+rep.ID {
		t.Errorf("queued: Location %q", r.header.Get("Location"))
	}
	// e' = 1 > delay 0: not before a minute from the decision.
	if rep.NotBefore == nil || rep.NotBefore.Before(before.Add(time.Minute-time.Second)) || rep.Position < 1 || rep.EstimatedStart == nil || rep.EstimatedStart.Before(*rep.NotBefore) {
		t.Errorf("queued: %s; want not_before a minute out, a position and an estimated start not before it", r.body)
	}
	if j, ok := b.jobOfKey(t, "q", queue.Backlog, "c"); !ok || j.ID != rep.ID || !j.NotBefore.Equal(*rep.NotBefore) {
		t.Errorf("the queued job in the backlog: %+v (found %v), want id %s not before %v", j, ok, rep.ID, rep.NotBefore)
	}
}

func TestHTTPRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	for range 3 {
		if r := b.post(t, "q", nil, "X-Client", "c"); r.code != http.StatusAccepted {
			t.Fatalf("%d %s", r.code, r.body)
		}
	}
	r := b.post(t, "q", nil, "X-Client", "c")
	p := r.problem
	if r.code != http.StatusTooManyRequests || r.header.Get("Content-Type") != spillway.ProblemContentType || p.Type != spillway.ProblemRateLimited {
		t.Fatalf("the fourth job: %d %s %s, want 429 %s", r.code, r.header.Get("Content-Type"), r.body, spillway.ProblemRateLimited)
	}
	if r.header.Get(spillway.HeaderStatus) != "rejected" || r.header.Get("Location") != "" || p.Queue != "q" || p.Instance != "/v1/queues/q/jobs" {
		t.Errorf("the fourth job: %v %s", r.header, r.body)
	}
	// e' would be 3 > burst 2: one unit must leak first, a minute less
	// the few milliseconds since the first job.
	if p.RetryAfterMS <= 59_000 || p.RetryAfterMS > 60_000 {
		t.Errorf("retry_after_ms %d, want just under 60000", p.RetryAfterMS)
	}
	if got, want := r.header.Get("Retry-After"), strconv.FormatInt((p.RetryAfterMS+999)/1000, 10); got != want || got != "60" {
		t.Errorf("Retry-After %q, want retry_after_ms %d in whole seconds rounded up, %s", got, p.RetryAfterMS, want)
	}
}

// TestHTTPRetryAfterRoundsUp: Retry-After is whole seconds, rounded up,
// never 0 for a wait under a second.
func TestHTTPRetryAfterRoundsUp(t *testing.T) {
	t.Parallel()
	b := setup(t, `
queues:
  - name: q
    limits: [{key: global, algorithm: leaky_bucket, rate: 2/s, burst: 0}]
    backlog: {capacity: 3, leak_rate: 1/s}
`, setupOptions{})
	if r := b.post(t, "q", nil); r.code != http.StatusAccepted {
		t.Fatalf("%d %s", r.code, r.body)
	}
	r := b.post(t, "q", nil)
	if r.code != http.StatusTooManyRequests || r.problem.RetryAfterMS <= 0 || r.problem.RetryAfterMS > 500 || r.header.Get("Retry-After") != "1" {
		t.Errorf("rejected at 2/s, burst 0: %d, Retry-After %q, %s; want 429, Retry-After 1, retry_after_ms in (0, 500]", r.code, r.header.Get("Retry-After"), r.body)
	}
}

// A known path with another method is 405 with Allow, as problem+json;
// a path the door does not serve (no metrics or UI handler was given) is
// 404, not a 405 telling the client to use GET.
func TestHTTPMethodNotAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t, `
queues:
  - name: q
    limits: [{key: global, rate: 1/s, burst: 5}]
    backlog: {leak_rate: 1/s}
`, setupOptions{})
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/queues/q/jobs", "POST"},
		{http.MethodPost, "/v1/queues/q", "GET, HEAD"},
		{http.MethodDelete, "/v1/queues", "GET, HEAD"},
		{http.MethodPut, "/v1/jobs/x", "GET, HEAD, DELETE"},
		{http.MethodPost, "/livez", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
	} {
		r := b.request(t, c.method, c.path)
		if r.code != http.StatusMethodNotAllowed || r.problem.Type != spillway.ProblemMethodNotAllowed || r.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q %s, want 405 Allow %q", c.method, c.path, r.code, r.header.Get("Allow"), r.body, c.allow)
		}
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/metrics"},
		{http.MethodGet, "/ui"},
		{http.MethodPost, "/metrics"},
		{http.MethodGet, "/v1/queues/q/jobs/x"},
	} {
		if r := b.request(t, c.method, c.path); r.code != http.StatusNotFound || r.problem.Type != spillway.ProblemNotFound {
			t.Errorf("%s %s without a metrics or UI handler: %d %s, want 404 %s", c.method, c.path, r.code, r.body, spillway.ProblemNotFound)
		}
	}
}

func TestHTTPBacklogFull(t *testing.T) {
	t.Parallel()
	// The limit queues up to 5 jobs of a key; the backlog takes 3, 2 of a key.
	b := setup(t, `
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 5}]
    backlog: {capacity: 3, per_key_capacity: 2, leak_rate: 1/m}
`, setupOptions{})
	steps := []struct {
		client string
		want   string // a problem type, or the status of a 202
	}{
		{"a", "admitted"}, {"a", "queued"}, {"a", "queued"},
		// Five more of key a, each refused for the key's share: had the
		// refused jobs kept their units, the last two would be
		// rate-limited (burst 5).
		{"a", spillway.ProblemKeyFull}, {"a", spillway.ProblemKeyFull}, {"a", spillway.ProblemKeyFull}, {"a", spillway.ProblemKeyFull}, {"a", spillway.ProblemKeyFull},
		{"b", "admitted"}, {"b", "queued"}, // the backlog holds 3
		{"c", "admitted"}, {"c", spillway.ProblemQueueFull}, {"c", spillway.ProblemQueueFull},
	}
	for i, s := range steps {
		r := b.post(t, "q", nil, "X-Client", s.client)
		if r.code == http.StatusAccepted {
			if string(r.reply.Status) != s.want {
				t.Fatalf("step %d, key %s: %s, want %s", i+1, s.client, r.body, s.want)
			}
			continue
		}
		if r.code != http.StatusTooManyRequests || r.problem.Type != s.want {
			t.Fatalf("step %d, key %s: %d %s, want 429 %s", i+1, s.client, r.code, r.body, s.want)
		}
		// The refused job's units are back, and the headers say so:
		// key a has taken 3 of its 6 (burst 5 + 1).
		if s.client == "a" && r.header.Get("X-RateLimit-Remaining") != "3" {
			t.Errorf("step %d: X-RateLimit-Remaining %q after a refund, want 3", i+1, r.header.Get("X-RateLimit-Remaining"))
		}
		// The first queued job (a's, rate 1/m) is due in a minute: a
		// place frees then, for the queue and for key a.
		if ms := r.problem.RetryAfterMS; ms < 59_000 || ms > 61_000 || r.header.Get("Retry-After") != strconv.FormatInt((ms+999)/1000, 10) || r.header.Get(spillway.HeaderStatus) != "rejected" {
			t.Errorf("step %d, key %s: Retry-After %q, %s; want retry_after_ms about 60000 and Retry-After in whole seconds", i+1, s.client, r.header.Get("Retry-After"), r.body)
		}
	}
	if n := b.msgs(t, "q", queue.Backlog); n != 3 {
		t.Errorf("the backlog holds %d jobs, want 3", n)
	}
}

func TestHTTPBadCost(t *testing.T) {
	t.Parallel()
	// One global bucket of 3 (burst 2 + 1): a bad request that took a unit
	// would show as a fourth job admitted less.
	b := setup(t, `
queues:
  - name: q
    limits: [{key: global, algorithm: leaky_bucket, rate: 1/m, burst: 2, nodelay: true}]
    backlog: {capacity: 3, leak_rate: 1/s}
`, setupOptions{})
	for _, cost := range []string{"0", "-1", "abc", "1.5", "0x10", "99999999999999999999", "9223372036854775807", "4"} {
		r := b.post(t, "q", []byte("x"), spillway.HeaderCost, cost)
		if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadCost || r.problem.Field != spillway.HeaderCost {
			t.Errorf("%s %q: %d %s, want 400 %s naming the header", spillway.HeaderCost, cost, r.code, r.body, spillway.ProblemBadCost)
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("%s %q: Retry-After %q on a 400", spillway.HeaderCost, cost, r.header.Get("Retry-After"))
		}
	}
	// 3 units, the whole quota: then the bucket is full.
	for _, cost := range []string{"2", " 1 "} {
		if r := b.post(t, "q", []byte("x"), spillway.HeaderCost, cost); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
			t.Fatalf("cost %q after the bad ones: %d %s, want admitted", cost, r.code, r.body)
		}
	}
	if r := b.post(t, "q", []byte("x")); r.code != http.StatusTooManyRequests {
		t.Errorf("a fourth unit: %d %s, want 429", r.code, r.body)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 2 {
		t.Errorf("%d jobs stored, want the 2 good ones", n)
	}
}

func TestHTTPBadKey(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	r := b.post(t, "q", nil, "X-Client", strings.Repeat("k", admit.MaxKeyLen+1))
	if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadKey || r.problem.Field != "X-Client" {
		t.Errorf("a key of %d bytes: %d %s, want 400 %s naming X-Client", admit.MaxKeyLen+1, r.code, r.body, spillway.ProblemBadKey)
	}
	if r := b.post(t, "q", nil, "X-Client", strings.Repeat("k", admit.MaxKeyLen)); r.code != http.StatusAccepted {
		t.Errorf("a key of MaxKeyLen bytes: %d %s, want 202", r.code, r.body)
	}
	r = b.post(t, "q", nil, "X-Client", "c", spillway.HeaderIdempotencyKey, strings.Repeat("i", admit.MaxIdempotencyKeyLen+1))
	if r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadRequest || r.problem.Field != spillway.HeaderIdempotencyKey {
		t.Errorf("an idempotency key of %d bytes: %d %s, want 400 %s naming %s", admit.MaxIdempotencyKeyLen+1, r.code, r.body, spillway.ProblemBadRequest, spillway.HeaderIdempotencyKey)
	}
	if r := b.post(t, "q", nil, "X-Client", "c", spillway.HeaderIdempotencyKey, strings.Repeat("i", admit.MaxIdempotencyKeyLen)); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
		t.Errorf("an idempotency key of MaxIdempotencyKeyLen bytes: %d %s, want admitted (no unit taken by the refused one)", r.code, r.body)
	}
}

const testKey = "k3y-0123456789abcdef"

func TestHTTPAuth(t *testing.T) {
	t.Parallel()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", "# the producers\n\nother-key-0123456789\n"+testKey+"\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	// One global bucket of 3, which a 401 must not touch.
	b := setup(t, `
queues:
  - name: q
    limits: [{key: global, algorithm: leaky_bucket, rate: 1/m, burst: 2, nodelay: true}]
    backlog: {capacity: 3, leak_rate: 1/s}
`, setupOptions{keys: keys})
	bad := [][]string{
		nil,
		{"Authorization", "Bearer wrong-key-0123456789"},
		{"Authorization", "Bearer " + testKey + "x"},
		{"Authorization", "Bearer"},
		{"Authorization", "Basic " + testKey},
		{"X-Api-Key", "wrong-key-0123456789"},
		{"X-Api-Key", testKey[:len(testKey)-1]},
		// A wrong bearer token is not rescued by a right X-Api-Key.
		{"Authorization", "Bearer wrong-key-0123456789", "X-Api-Key", testKey},
	}
	for _, h := range bad {
		for range 2 {
			r := b.post(t, "q", []byte("x"), h...)
			if r.code != http.StatusUnauthorized || r.problem.Type != spillway.ProblemUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("POST with %q: %d %v %s, want 401 %s with WWW-Authenticate", h, r.code, r.header, r.body, spillway.ProblemUnauthorized)
			}
		}
		for _, path := range []string{"/v1/queues", "/v1/queues/q", "/v1/jobs/01a209be-09a0-7341-a4e7-164ab9ce072d"} {
			if r := b.get(t, path, h...); r.code != http.StatusUnauthorized || r.problem.Type != spillway.ProblemUnauthorized {
				t.Errorf("GET %s with %q: %d %s, want 401", path, h, r.code, r.body)
			}
		}
	}
	// Probes need no key.
	for _, path := range []string{"/livez", "/readyz"} {
		if r := b.get(t, path); r.code != http.StatusOK {
			t.Errorf("GET %s without a key: %d, want 200", path, r.code)
		}
	}
	// The 401s took nothing: the bucket's whole quota is there.
	good := [][]string{
		{"Authorization", "Bearer " + testKey},
		{"X-Api-Key", testKey},
		{"Authorization", "Bearer other-key-0123456789"},
	}
	for _, h := range good {
		if r := b.post(t, "q", []byte("x"), h...); r.code != http.StatusAccepted || r.reply.Status != spillway.Admitted {
			t.Fatalf("POST with %q: %d %s, want admitted", h, r.code, r.body)
		}
	}
	if r := b.post(t, "q", []byte("x"), good[0]...); r.code != http.StatusTooManyRequests {
		t.Errorf("a fourth authorized job: %d %s, want 429 (the quota is 3)", r.code, r.body)
	}
	for _, path := range []string{"/v1/queues", "/v1/queues/q"} {
		if r := b.get(t, path, good[1]...); r.code != http.StatusOK {
			t.Errorf("GET %s with a key: %d %s", path, r.code, r.body)
		}
	}
	if n := b.msgs(t, "q", queue.Ready); n != 3 {
		t.Errorf("READY holds %d jobs, want 3", n)
	}
}

// TestHTTPAuthSchemeIsCaseInsensitive: the scheme of an Authorization
// header is a case-insensitive token (RFC 9110 §11.1).
func TestHTTPAuthSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, basicConfig, setupOptions{keys: keys})
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		if r := b.post(t, "q", nil, "X-Client", scheme, "Authorization", scheme+" "+testKey); r.code != http.StatusAccepted {
			t.Errorf("Authorization: %s KEY: %d %s, want 202", scheme, r.code, r.body)
		}
	}
}

func TestLoadAPIKeys(t *testing.T) {
	t.Parallel()
	if _, err := door.LoadAPIKeys(writeFile(t, "keys", "  "+testKey+"  \n# comment\n")); err != nil {
		t.Errorf("a good file: %v", err)
	}
	for _, c := range []struct {
		name, content string
		want          []string // in the error
	}{
		{"short key", "# keys\n" + testKey + "\nshort-key\n", []string{"keys:3", "9 characters", "at least 16"}},
		{"empty file", "", []string{"no API key"}},
		{"only comments", "# nothing\n\n   \n", []string{"no API key"}},
	} {
		path := writeFile(t, "keys", c.content)
		k, err := door.LoadAPIKeys(path)
		if err == nil || k != nil {
			t.Errorf("%s: %v, %v; want an error", c.name, k, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: the error shows a key: %q", c.name, err)
		}
	}
	if _, err := door.LoadAPIKeys(t.TempDir() + "/missing"); err == nil {
		t.Error("a missing file: no error")
	}
}

// blockingBody is a request body that never ends: a door that reads it
// never answers.
func blockingBody(t *testing.T) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	return pr
}

func TestHTTPNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	// An unknown queue is refused before the body is read: a gigabyte
	// announced and never sent is not waited for (nor called too large).
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/queues/nope/jobs", blockingBody(t))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1 << 30
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := readResponse(t, resp)
	if r.code != http.StatusNotFound || r.problem.Type != spillway.ProblemNotFound || !strings.Contains(r.problem.Detail, "nope") {
		t.Errorf("an unknown queue: %d %s, want 404 %s", r.code, r.body, spillway.ProblemNotFound)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/nope"},
		{http.MethodPost, "/v1/jobs"},
		{http.MethodGet, "/v1/queues/nope"},
	} {
		if r := b.request(t, c.method, c.path); r.code != http.StatusNotFound || r.problem.Type != spillway.ProblemNotFound {
			t.Errorf("%s %s: %d %s, want 404 %s", c.method, c.path, r.code, r.body, spillway.ProblemNotFound)
		}
	}
}

func TestHTTPTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{}) // max_body_bytes: 64
	send := func(body io.Reader, length int64) response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/queues/q/jobs", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		req.Header.Set("X-Client", "c")
		resp, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResponse(t, resp)
	}
	// Content-Length over the limit: refused before reading — a gigabyte
	// announced and never sent is not waited for. (Go's server itself
	// reads up to 256 KiB of a body the handler left, before answering.)
	if r := send(blockingBody(t), 1<<30); r.code != http.StatusRequestEntityTooLarge || r.problem.Type != spillway.ProblemTooLarge {
		t.Errorf("Content-Length 1 GiB: %d %s, want 413 %s", r.code, r.body, spillway.ProblemTooLarge)
	}
	if r := send(bytes.NewReader(make([]byte, 65)), 65); r.code != http.StatusRequestEntityTooLarge || r.problem.Type != spillway.ProblemTooLarge {
		t.Errorf("Content-Length 65: %d %s, want 413 %s", r.code, r.body, spillway.ProblemTooLarge)
	}
	// A chunked body (no Content-Length) over the limit, and one that
	// never ends: refused once 65 bytes have come.
	for name, body := range map[string]io.Reader{
		"65 bytes":   bytes.NewReader(make([]byte, 65)),
		"a megabyte": bytes.NewReader(make([]byte, 1<<20)),
		"endless":    io.MultiReader(bytes.NewReader(make([]byte, 65)), blockingBody(t)),
	} {
		if r := send(io.NopCloser(body), -1); r.code != http.StatusRequestEntityTooLarge || r.problem.Type != spillway.ProblemTooLarge {
			t.Errorf("a chunked body of %s: %d %s, want 413", name, r.code, r.body)
		}
	}
	// At the limit, either way.
	if r := send(bytes.NewReader(make([]byte, 64)), 64); r.code != http.StatusAccepted {
		t.Errorf("64 bytes: %d %s, want 202", r.code, r.body)
	}
	if r := send(io.NopCloser(bytes.NewReader(make([]byte, 64))), -1); r.code != http.StatusAccepted {
		t.Errorf("64 bytes chunked: %d %s, want 202", r.code, r.body)
	}
	if n := b.msgs(t, "q", queue.Ready) + b.msgs(t, "q", queue.Backlog); n != 2 {
		t.Errorf("%d jobs stored, want 2", n)
	}
}

// countingReader is an endless body that counts what was read of it.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// TestHTTPBodyReadIsBounded: the door reads at most max_body_bytes + 1
// of a body, however long it is.
func TestHTTPBodyReadIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	body := &countingReader{}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/queues/q/jobs", body)
	req.ContentLength = -1
	r := b.serve(t, req)
	if r.code != http.StatusRequestEntityTooLarge || body.n > 65 {
		t.Errorf("an endless body: %d after reading %d bytes; want 413 after at most 65", r.code, body.n)
	}
}

func TestHTTPJobStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, basicConfig, setupOptions{})
	for _, id := range []string{"not-a-job", "01A209BE-09A0-7341-A4E7-164AB9CE072D", "0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f", "*", "a.b"} {
		if r := b.get(t, "/v1/jobs/"+id); r.code != http.StatusBadRequest || r.problem.Type != spillway.ProblemBadRequest {
			t.Errorf("GET /v1/jobs/%s: %d %s, want 400 %s", id, r.code, r.body, spillway.ProblemBadRequest)
		}
	}
	unknown, err := queue.NewJobID("q")
	if err != nil {
		t.Fatal(err)
	}
	if r := b.get(t, "/v1/jobs/"+unknown); r.code != http.StatusNotFound || r.problem.Type != spillway.ProblemNotFound || r.problem.ID != unknown {
		t.Errorf("GET an unknown job: %d %s, want 404 %s naming it", r.code, r.body, spillway.ProblemNotFound)
	}
	for _, want := range []spillway.State{spillway.StateAdmitted, spillway.StateQueued} {
		sub := b.post(t, "q", nil, "X-Client", "c")
		if sub.code != http.StatusAccepted {
			t.Fatalf("%d %s", sub.code, sub.body)
		}
		loc := sub.header.Get("Location")
		var r response
		admittest.WaitFor(t, 10*time.Second, "the job's status record", func() bool {
			r = b.get(t, loc)
			return r.code != http.StatusNotFound
		})
		var rec jobstatus.Record
		if err := json.Unmarshal(r.body, &rec); err != nil || r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET %s: %d %s (%v)", loc, r.code, r.body, err)
		}
		if rec.ID != sub.reply.ID || rec.Queue != "q" || rec.State != want || rec.Attempts != 0 || rec.EnqueuedAt.IsZero() {
			t.Errorf("GET %s: %+v, want job %s of q, %s, not started", loc, rec, sub.reply.ID, want)
		}
		if want == spillway.StateQueued && !rec.NotBefore.Equal(*sub.reply.NotBefore) {
			t.Errorf("GET %s: not before %v, want the answer's %v", loc, rec.NotBefore, sub.reply.NotBefore)
		}
	}
}

func TestHTTPQueues(t *testing.T) {
	t.Parallel()
	b := setup(t, `
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 5}]
    backlog: {capacity: 100, per_key_capacity: 10, leak_rate: 5/s}
    ready: {capacity: 50}
  - name: other
    limits: [{key: global, algorithm: token_bucket, rate: 1/s, burst: 5}]
    backlog: {capacity: 7, leak_rate: 1/m}
`, setupOptions{})
	for range 3 {
		if r := b.post(t, "q", nil, "X-Client", "c"); r.code != http.StatusAccepted {
			t.Fatalf("%d %s", r.code, r.body)
		}
	}
	r := b.get(t, "/v1/queues/q")
	var qi spillway.QueueInfo
	if err := json.Unmarshal(r.body, &qi); err != nil || r.code != http.StatusOK {
		t.Fatalf("GET /v1/queues/q: %d %s (%v)", r.code, r.body, err)
	}
	want := spillway.QueueInfo{Name: "q", Ready: 1, ReadyCapacity: 50, Depth: 2, Capacity: 100, PerKeyCapacity: 10, Fill: 0.02,
		LeakRate: "5/s", LeakPerSecond: 5, LeakRateCurrent: 5, EstimatedDrainMS: 400}
	qi.OldestAgeMS = 0 // time-dependent
	if qi != want {
		t.Errorf("GET /v1/queues/q:\n got %+v\nwant %+v", qi, want)
	}
	r = b.get(t, "/v1/queues")
	var list spillway.QueueList
	if err := json.Unmarshal(r.body, &list); err != nil || r.code != http.StatusOK {
		t.Fatalf("GET /v1/queues: %d %s (%v)", r.code, r.body, err)
	}
	if len(list.Queues) != 2 || list.Queues[0].Name != "q" || list.Queues[0].Depth != 2 || list.Queues[1].Name != "other" ||
		list.Queues[1].Capacity != 7 || list.Queues[1].LeakRate != "1/m" || list.Queues[1].Depth != 0 {
		t.Errorf("GET /v1/queues: %s", r.body)
	}
	if r := b.get(t, "/v1/queues/nope"); r.code != http.StatusNotFound || r.problem.Type != spillway.ProblemNotFound {
		t.Errorf("GET /v1/queues/nope: %d %s", r.code, r.body)
	}
}

// The leak's rate now is read from the state the workers share: after a
// pushback, an adaptive queue's leak_rate_current is the cut rate and
// leak_paused_ms the pause left.
func TestHTTPQueuesLeakRateCurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, `
queues:
  - name: q
    limits: [{key: global, rate: 1/s}]
    backlog: {leak_rate: {max: 100/s, adaptive: true}}
`, setupOptions{})
	leak := func() spillway.QueueInfo {
		t.Helper()
		var qi spillway.QueueInfo
		r := b.get(t, "/v1/queues/q")
		if err := json.Unmarshal(r.body, &qi); err != nil || r.code != http.StatusOK {
			t.Fatalf("GET /v1/queues/q: %d %s (%v)", r.code, r.body, err)
		}
		return qi
	}
	if qi := leak(); qi.LeakRateCurrent != 100 || qi.LeakPausedMS != 0 { // no worker yet: no pacer bucket
		t.Errorf("before any worker: leak_rate_current %v, leak_paused_ms %d; want 100, 0", qi.LeakRateCurrent, qi.LeakPausedMS)
	}
	kv, err := pace.OpenPacerBucket(t.Context(), b.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pace.NewKVPacer(kv, "q", bucket.Rate{Count: 100, Per: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	yp, err := pace.NewYieldingPacer(kp, kv, "q", bucket.Rate{Count: 100, Per: time.Second}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := yp.Yield(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if qi := leak(); qi.LeakRateCurrent < 70 || qi.LeakRateCurrent > 71 || qi.LeakPausedMS <= 50_000 {
		t.Errorf("after a pushback: leak_rate_current %v, leak_paused_ms %d; want about 70 (the cut), about 60 000", qi.LeakRateCurrent, qi.LeakPausedMS)
	}
}

// TestHTTPRateLimitHeaders: the headers describe the bounding tier, in
// The leaky bucket's terms (docs/design.md#leaky-bucket): quota burst+1 per the time it takes to
// drain, remaining burst−e', reset the time until the bucket is empty;
// for a rejected job the reset is its Retry-After.
func TestHTTPRateLimitHeaders(t *testing.T) {
	t.Parallel()
	// Rate 1/m, burst 1: quota 2 per 120 s. Within a test nothing leaks
	// out that rounding up to seconds would show.
	b := setup(t, `
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 1, nodelay: true}
    backlog: {capacity: 3, leak_rate: 1/s}
  - name: two
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 9, nodelay: true}
      - {key: global, algorithm: leaky_bucket, rate: 1/s, burst: 1, nodelay: true}
    backlog: {capacity: 3, leak_rate: 1/s}
`, setupOptions{})
	type want struct {
		code                    int
		policy, limit           string
		xLimit, xRemain, xReset string
	}
	for i, w := range []want{
		// e' = 0: 1 unit remains; empty after the unit in service leaks (60 s).
		{202, `"tier0";q=2;w=120`, `"tier0";r=1;t=60`, "2", "1", "60"},
		// e' = 1: none remains; empty in 120 s.
		{202, `"tier0";q=2;w=120`, `"tier0";r=0;t=120`, "2", "0", "120"},
		// Rejected: e' would be 2 > 1; a unit leaks in 60 s.
		{429, `"tier0";q=2;w=120`, `"tier0";r=0;t=60`, "2", "0", "60"},
	} {
		r := b.post(t, "q", nil, "X-Client", "c")
		got := want{r.code, r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"),
			r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Reset")}
		if got != w {
			t.Errorf("job %d:\n got %+v\nwant %+v", i+1, got, w)
		}
		if w.code == 429 && r.header.Get("Retry-After") != w.xReset {
			t.Errorf("job %d: Retry-After %q, want %s", i+1, r.header.Get("Retry-After"), w.xReset)
		}
	}
	// Two tiers: the global one (burst 1, rate 1/s) bounds the answer
	// once it has less room than the key's.
	r := b.post(t, "two", nil, "X-Client", "c")
	if p := r.header.Get("RateLimit-Policy"); r.code != 202 || p != `"tier1";q=2;w=2` || r.header.Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("two tiers, first job: %d %q %v", r.code, p, r.header)
	}
	// (Its t is the decision's ResetAfter, the time until every tier is
	// empty — here the key's tier, 120 s — not the named tier's own.)
	r = b.post(t, "two", nil, "X-Client", "c")
	if p := r.header.Get("RateLimit-Policy"); r.code != 202 || p != `"tier1";q=2;w=2` || !strings.HasPrefix(r.header.Get("RateLimit"), `"tier1";r=0;t=`) {
		t.Errorf("two tiers, second job: %d %q %q", r.code, p, r.header.Get("RateLimit"))
	}
}

// TestHTTPClientIP: the ip tier's key is the peer's address; a proxy's
// X-Forwarded-For counts only when the peer is a trusted proxy, and then
// its rightmost address that is not a trusted proxy is the client.
func TestHTTPClientIP(t *testing.T) {
	t.Parallel()
	b := setup(t, `
http: {trusted_proxies: [10.0.0.0/8, "2001:db8:1::/48"]}
queues:
  - name: q
    limits: [{key: ip, algorithm: token_bucket, rate: 1/s, burst: 1000}]
    backlog: {capacity: 10, leak_rate: 1/s}
`, setupOptions{})
	for _, c := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"203.0.113.5:4000", nil, "203.0.113.5"},
		{"203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},       // untrusted peer: ignored
		{"203.0.113.5:4000", []string{"10.0.0.9, 10.0.0.8"}, "203.0.113.5"}, // even if it names trusted proxies
		{"10.0.0.1:4000", nil, "10.0.0.1"},
		{"10.0.0.1:4000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"10.0.0.1:4000", []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9"},
		{"10.0.0.1:4000", []string{"198.51.100.1, 203.0.113.9, 10.0.0.7"}, "203.0.113.9"},
		{"10.0.0.1:4000", []string{"198.51.100.1", "203.0.113.9, 10.0.0.7"}, "203.0.113.9"}, // two header lines
		{"10.0.0.1:4000", []string{"10.0.0.8, 10.0.0.7"}, "10.0.0.8"},                       // all trusted: the farthest
		{"10.0.0.1:4000", []string{" 198.51.100.1 ,203.0.113.9 "}, "203.0.113.9"},
		{"10.0.0.1:4000", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		{"[::ffff:10.0.0.1]:4000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"[::ffff:203.0.113.5]:4000", nil, "203.0.113.5"}, // untrusted, mapped: as IPv4
		{"[2001:db8:1::5]:4000", []string{"2001:db8:2::5"}, "2001:db8:2::5"},
		{"[2001:db8:2::5]:4000", []string{"198.51.100.1"}, "2001:db8:2::5"},
		// Garbage stops the walk: nothing beyond it is believed, and the
		// last trusted hop is the key.
		{"10.0.0.1:4000", []string{"garbage"}, "10.0.0.1"},
		{"10.0.0.1:4000", []string{"198.51.100.1, garbage, 10.0.0.7"}, "10.0.0.7"},
		{"10.0.0.1:4000", []string{"198.51.100.1, 203.0.113.9:5555"}, "10.0.0.1"},
		{"10.0.0.1:4000", []string{"198.51.100.1,,"}, "10.0.0.1"},
		{"10.0.0.1:4000", []string{"unknown"}, "10.0.0.1"},
	} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/queues/q/jobs", nil)
		req.RemoteAddr = c.peer
		for _, v := range c.xff {
			req.Header.Add("X-Forwarded-For", v)
		}
		r := b.serve(t, req)
		if r.code != http.StatusAccepted {
			t.Fatalf("peer %s, X-Forwarded-For %q: %d %s", c.peer, c.xff, r.code, r.body)
		}
		if j, ok := b.jobOfKey(t, "q", queue.Ready, c.want); !ok || j.ID != r.reply.ID {
			t.Errorf("peer %s, X-Forwarded-For %q: the job is not keyed by %s (found %v: %+v)", c.peer, c.xff, c.want, ok, j)
		}
	}
}

// TestHTTPForwardedForOverTheNetwork: from an untrusted peer a spoofed
// X-Forwarded-For changes nothing — every spoof lands in the peer's own
// bucket — and from a trusted proxy it names the client.
func TestHTTPForwardedForOverTheNetwork(t *testing.T) {
	t.Parallel()
	const queues = `
queues:
  - name: q
    limits: [{key: ip, algorithm: leaky_bucket, rate: 1/h, burst: 0}]
    backlog: {capacity: 10, leak_rate: 1/s}
`
	untrusted := setup(t, queues, setupOptions{})
	r := untrusted.post(t, "q", nil, "X-Forwarded-For", "198.51.100.1")
	if r.code != http.StatusAccepted {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if j, ok := untrusted.jobOfKey(t, "q", queue.Ready, "127.0.0.1"); !ok || j.ID != r.reply.ID {
		t.Errorf("a spoofed X-Forwarded-For from an untrusted peer: the job is not keyed by the peer, 127.0.0.1")
	}
	for _, spoof := range []string{"198.51.100.2", "198.51.100.3, 198.51.100.4", "garbage"} {
		if r := untrusted.post(t, "q", nil, "X-Forwarded-For", spoof); r.code != http.StatusTooManyRequests {
			t.Errorf("X-Forwarded-For %q from the same untrusted peer: %d %s, want 429 (one bucket)", spoof, r.code, r.body)
		}
	}

	trusted := setup(t, "http: {trusted_proxies: [127.0.0.1]}\n"+queues, setupOptions{})
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		r := trusted.post(t, "q", nil, "X-Forwarded-For", client)
		if r.code != http.StatusAccepted {
			t.Fatalf("client %s behind a trusted proxy: %d %s, want its own bucket", client, r.code, r.body)
		}
		if j, ok := trusted.jobOfKey(t, "q", queue.Ready, client); !ok || j.ID != r.reply.ID {
			t.Errorf("client %s behind a trusted proxy: the job is not keyed by it", client)
		}
	}
	if r := trusted.post(t, "q", nil, "X-Forwarded-For", "198.51.100.1"); r.code != http.StatusTooManyRequests {
		t.Errorf("the first client again: %d %s, want 429", r.code, r.body)
	}
}

var subjectToken = func(s string) bool {
	if len(s) != queue.KeyTokenLen {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// hostileConfig queues every job of a key after its first, so the keys'
// jobs are in the backlog, one subject per key.
const hostileConfig = `
queues:
  - name: q
    limits: [{key: "header:X-Client", algorithm: leaky_bucket, rate: 1/h, burst: 5}]
    backlog: {capacity: 100, per_key_capacity: 1, leak_rate: 1/s}
`

// checkSubjects checks that the backlog holds one job of each key, under
// the key's token and no other subject, with the raw key in its header.
func checkSubjects(t *testing.T, b *testBundle, keys []string) {
	t.Helper()
	s, err := b.JS.Stream(context.Background(), queue.StreamName("q", queue.Backlog))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstreamSubjects())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, k := range keys {
		want[queue.Subject("q", queue.Backlog, k)] = k
	}
	if len(info.State.Subjects) != len(keys) {
		t.Errorf("the backlog has %d subjects, want %d: %v", len(info.State.Subjects), len(keys), info.State.Subjects)
	}
	for subj, n := range info.State.Subjects {
		token, ok := strings.CutPrefix(subj, "spillway.backlog.q.")
		if !ok || !subjectToken(token) || n != 1 {
			t.Errorf("backlog subject %q (%d jobs): want spillway.backlog.q.<26 of [a-z2-7]>", subj, n)
		}
		k, ok := want[subj]
		if !ok {
			t.Errorf("backlog subject %q is no key's token", subj)
			continue
		}
		j, found := b.jobOfKey(t, "q", queue.Backlog, k)
		if !found || j.Key != k {
			t.Errorf("the job of key %q: %+v (found %v), want the raw key in its header", k, j, found)
		}
	}
}

// TestHTTPHostileKeys: any key is a key; none reaches a subject.
func TestHTTPHostileKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, hostileConfig, setupOptions{})
	keys := []string{".", "a.b", "*", ">", "a.>", "a b", "..", "\xff\xfe\xfd", "é.*>", strings.Repeat(".", admit.MaxKeyLen)}
	for _, k := range keys {
		for _, want := range []spillway.Status{spillway.Admitted, spillway.Queued} {
			if r := b.post(t, "q", nil, "X-Client", k); r.code != http.StatusAccepted || r.reply.Status != want {
				t.Fatalf("key %q: %d %s, want %s", k, r.code, r.body, want)
			}
		}
	}
	checkSubjects(t, b, keys)
}
