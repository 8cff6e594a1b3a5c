package door

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestAppendSubmitReply: the answer's body is json.Marshal's, byte for
// byte, for the replies written directly and those left to it.
func TestAppendSubmitReply(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 6, 0, 0, 123456789, time.UTC)
	for _, rep := range []spillway.SubmitReply{
		{},
		{ID: "01JDZ3Q7W0S9H2X4M5N6P7R8T9", Queue: "emails", Status: spillway.Admitted},
		{ID: "j1", Queue: "q", Status: spillway.Queued, Position: 42},
		{ID: "j1", Queue: "q", Status: spillway.Admitted, Duplicate: true},
		{Queue: "q", Status: spillway.Rejected, RetryAfterMS: 1500, Type: spillway.ProblemRateLimited, Error: "the key's limit is full"},
		{Queue: "q", Status: spillway.Queued, Position: -1, RetryAfterMS: -2},
		{ID: "j1", Queue: "q", Status: spillway.Queued, NotBefore: &at, EstimatedStart: &at, Position: 3},
		{ID: "j1", Queue: "<q&a>", Status: spillway.Admitted},
		{ID: "j\"1\\", Queue: "q\n", Status: "é", Error: "\u2028", Type: "\xff"},
	} {
		want, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSubmitReply(nil, &rep); string(got) != string(want) {
			t.Errorf("%+v:\n got %s\nwant %s", rep, got, want)
		}
	}
}

func FuzzAppendSubmitReply(f *testing.F) {
	f.Add("01JDZ3Q7W0S9H2X4M5N6P7R8T9", "emails", "admitted", int64(0), int64(0), false, "", "")
	f.Add("j", "q", "rejected", int64(-3), int64(1500), true, "full <now>", spillway.ProblemQueueFull)
	f.Fuzz(func(t *testing.T, id, q, status string, pos, retry int64, dup bool, msg, typ string) {
		rep := spillway.SubmitReply{ID: id, Queue: q, Status: spillway.Status(status), Position: pos,
			RetryAfterMS: retry, Duplicate: dup, Error: msg, Type: typ}
		want, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSubmitReply([]byte("x"), &rep); string(got) != "x"+string(want) {
			t.Errorf("got %s\nwant x%s", got, want)
		}
	})
}

// TestAnswerHeaders: the headers set at once are those Header.Set makes,
// and a value's slice is its own: an Add to one changes no other.
func TestAnswerHeaders(t *testing.T) {
	t.Parallel()
	rl := &admit.RateLimit{Policies: []admit.RatePolicy{
		{Name: "per-client", Quota: 100, Window: time.Second},
		{Name: "global \"all\"", Quota: 5000, Window: 1500 * time.Millisecond},
	}, Counted: true, Remaining: 7, Reset: 300 * time.Millisecond}
	var a answerHeaders
	rateLimitHeaders(&a, rl)
	a.addValue(headerContentType, "application/json")
	a.buf = append(a.buf, "/v1/jobs/j1"...)
	a.add(headerLocation)
	got := http.Header{"X-Before": {"kept"}, "Location": {"replaced"}}
	a.set(got)

	want := http.Header{"X-Before": {"kept"}}
	want.Set("RateLimit-Policy", `"per-client";q=100;w=1, "global \"all\"";q=5000;w=2`)
	want.Set("RateLimit", `"per-client";r=7;t=1`)
	want.Set("X-RateLimit-Limit", "100")
	want.Set("X-RateLimit-Remaining", "7")
	want.Set("X-RateLimit-Reset", "1")
	want.Set("Content-Type", "application/json")
	want.Set("Location", "/v1/jobs/j1")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	got.Add("X-RateLimit-Limit", "second")
	if v := got.Values("X-RateLimit-Remaining"); len(v) != 1 || v[0] != "7" {
		t.Errorf("X-RateLimit-Remaining after an Add to the header before it: %q", v)
	}

	var none answerHeaders
	rateLimitHeaders(&none, &admit.RateLimit{})
	h := http.Header{}
	none.set(h)
	if len(h) != 0 {
		t.Errorf("no policies: headers %v", h)
	}
}

// TestWriteSubmitReply: an admitted job's answer, status, headers and
// body, as the door wrote it with Header.Set and json.Marshal, on the
// wire: Content-Length is the server's.
func TestWriteSubmitReply(t *testing.T) {
	t.Parallel()
	for _, rep := range []spillway.SubmitReply{
		{ID: "01JDZ3Q7W0S9H2X4M5N6P7R8T9", Queue: "emails", Status: spillway.Admitted},
		{ID: "j2", Queue: "emails", Status: spillway.Queued, Position: 12},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			var a answerHeaders
			rateLimitHeaders(&a, &admit.RateLimit{Policies: []admit.RatePolicy{{Name: "p", Quota: 10, Window: time.Minute}}})
			writeSubmitReply(w, &a, &rep)
		}))
		t.Cleanup(srv.Close)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body, _ := json.Marshal(rep)
		body = append(body, '\n')
		if resp.StatusCode != http.StatusAccepted || string(got) != string(body) {
			t.Errorf("%d %s, want 202 %s", resp.StatusCode, got, body)
		}
		want := http.Header{}
		want.Set("RateLimit-Policy", `"p";q=10;w=60`)
		want.Set("Location", "/v1/jobs/"+rep.ID)
		want.Set(spillway.HeaderStatus, string(rep.Status))
		want.Set("Content-Type", "application/json")
		want.Set("Content-Length", strconv.Itoa(len(body)))
		resp.Header.Del("Date")
		if !reflect.DeepEqual(resp.Header, want) {
			t.Errorf("headers\n got %v\nwant %v", resp.Header, want)
		}
	}
}
