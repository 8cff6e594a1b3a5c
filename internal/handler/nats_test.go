package handler_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

// respond answers every request on subject with reply (nil: no answer)
// and hands the requests to the test.
func respond(t *testing.T, nc *nats.Conn, subject string, reply func(req *nats.Msg) *nats.Msg) <-chan *nats.Msg {
	t.Helper()
	got := make(chan *nats.Msg, 16)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		got <- m
		if r := reply(m); r != nil {
			if err := m.RespondMsg(r); err != nil {
				t.Errorf("responder: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatalf("subscribing to %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return got
}

func replyWith(header map[string]string, body string) func(*nats.Msg) *nats.Msg {
	return func(*nats.Msg) *nats.Msg {
		m := nats.NewMsg("")
		for k, v := range header {
			m.Header.Set(k, v)
		}
		m.Data = []byte(body)
		return m
	}
}

func mustNATS(t *testing.T, nc *nats.Conn, cfg handler.NATSConfig) func(subject string) error {
	t.Helper()
	return func(subject string) error {
		cfg.Subject = subject
		h, err := handler.NATS(nc, cfg)
		if err != nil {
			t.Fatalf("NATS(%+v): %v", cfg, err)
		}
		return h(t.Context(), testJob())
	}
}

func TestNATSSendsPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	nc := srv.Connect(t)
	got := respond(t, srv.Connect(t), "jobs.email", replyWith(nil, ""))
	if err := mustNATS(t, nc, handler.NATSConfig{})("jobs.email"); err != nil {
		t.Fatalf("handler: %v", err)
	}
	m := <-got
	if string(m.Data) != "hello, downstream" {
		t.Errorf("payload %q", m.Data)
	}
	want := map[string]string{
		"Spillway-Job-Id":  testID,
		"Spillway-Queue":   "email",
		"Spillway-Key":     "tenant-42",
		"Spillway-Attempt": "3",
		"Idempotency-Key":  testID,
		"Traceparent":      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"Tracestate":       "vendor=x",
		"X-Api-Key":        "",
	}
	for name, v := range want {
		if g := m.Header.Get(name); g != v {
			t.Errorf("header %s = %q, want %q", name, g, v)
		}
	}
}

func TestNATSReplyProtocol(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	nc, responder := srv.Connect(t), srv.Connect(t)
	h := mustNATS(t, nc, handler.NATSConfig{})
	var (
		success   = outcome{ok: true}
		permanent = outcome{permanent: true}
		plain     = outcome{}
		after     = func(d time.Duration) outcome { return outcome{after: d, hasAfter: true} }
		push      = func(o outcome) outcome { o.pushback = true; return o }
	)
	tests := []struct {
		name    string
		header  map[string]string
		body    string
		want    outcome
		wantErr string
	}{
		{name: "no headers", body: "whatever the body says", want: success},
		{name: "ok", header: map[string]string{"Spillway-Status": "ok"}, want: success},
		{name: "OK, any case", header: map[string]string{"spillway-status": "OK"}, want: success},
		{name: "error alone means retry", header: map[string]string{"Spillway-Error": "smtp busy"}, want: plain,
			wantErr: "request jobs.s: smtp busy"},
		{name: "retry", header: map[string]string{"Spillway-Status": "retry", "Spillway-Error": "smtp busy"}, want: plain},
		{name: "retry after seconds", header: map[string]string{"Spillway-Status": "retry", "Retry-After": "12"}, want: after(12 * time.Second)},
		{name: "retry after a date", header: map[string]string{"Spillway-Status": "retry", "Retry-After": time.Now().Add(time.Hour + time.Minute).UTC().Format(http.TimeFormat)},
			want: after(time.Hour)},
		{name: "retry explained by the body", header: map[string]string{"Spillway-Status": "retry"}, body: "quota\nexceeded", want: plain,
			wantErr: "request jobs.s: quota exceeded"},
		{name: "retry without a word", header: map[string]string{"Spillway-Status": "retry"}, want: plain,
			wantErr: "request jobs.s: replied Spillway-Status: retry"},
		{name: "permanent", header: map[string]string{"Spillway-Status": "permanent", "Spillway-Error": "no such mailbox"}, want: permanent,
			wantErr: "permanent: request jobs.s: no such mailbox"},
		{name: "permanent ignores Retry-After", header: map[string]string{"Spillway-Status": "Permanent", "Retry-After": "5"}, want: permanent},
		{name: "busy", header: map[string]string{"Spillway-Status": "busy", "Spillway-Error": "smtp relay saturated"}, want: push(plain),
			wantErr: "request jobs.s: smtp relay saturated"},
		{name: "busy after seconds", header: map[string]string{"Spillway-Status": "Busy", "Retry-After": "2"}, want: push(after(2 * time.Second))},
		{name: "busy without a word", header: map[string]string{"Spillway-Status": "busy"}, want: push(plain),
			wantErr: "request jobs.s: replied Spillway-Status: busy"},
		{name: "unknown status is retried", header: map[string]string{"Spillway-Status": "later", "Spillway-Error": "hm"}, want: plain,
			wantErr: `request jobs.s: hm (unknown Spillway-Status "later", retried)`},
		// The body is quoted as a short excerpt (80 bytes, …), printable
		// only: it may echo anything, and the error is a job's last_error.
		{name: "a long body is an excerpt", header: map[string]string{"Spillway-Status": "retry"},
			body: "failed:\x1b[2J " + strings.Repeat("y", 100) + " token=SECRET", want: plain,
			wantErr: "request jobs.s: failed:\uFFFD[2J " + strings.Repeat("y", 80-len("failed:\uFFFD[2J ")) + "…"},
		{name: "a long error is cut", header: map[string]string{"Spillway-Error": strings.Repeat("z", 300)}, want: plain,
			wantErr: "request jobs.s: " + strings.Repeat("z", 256) + "…"},
	}
	var current atomic.Pointer[nats.Msg] // the reply of the case being run
	got := respond(t, responder, "jobs.s", func(*nats.Msg) *nats.Msg { return current.Load() })
	for _, tt := range tests {
		current.Store(replyWith(tt.header, tt.body)(nil))
		err := h("jobs.s")
		<-got
		if o := outcomeOf(err); o != tt.want {
			t.Errorf("%s: %v (%v), want %v", tt.name, o, err, tt.want)
		}
		if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
			t.Errorf("%s: error %q, want %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestNATSNoResponders(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	err := mustNATS(t, srv.Connect(t), handler.NATSConfig{})("jobs.nobody")
	if o := outcomeOf(err); o != (outcome{}) || !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("error %v: %v, want a plain retry wrapping nats.ErrNoResponders", err, o)
	}
}

func TestNATSTimeout(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	got := respond(t, srv.Connect(t), "jobs.slow", func(*nats.Msg) *nats.Msg { return nil })
	began := time.Now()
	err := mustNATS(t, srv.Connect(t), handler.NATSConfig{Timeout: 100 * time.Millisecond})("jobs.slow")
	<-got
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("returned after %v, want about 100ms", took)
	}
	if o := outcomeOf(err); o != (outcome{}) || err.Error() != "request jobs.slow: no reply within 100ms: context deadline exceeded" {
		t.Errorf("error %v: %v, want a plain retry: no reply within 100ms", err, o)
	}
}

func TestNATSRejectsConfig(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	nc := srv.Connect(t)
	for _, subject := range []string{"", "jobs.*", "jobs.>", "jobs..x", ".jobs", "jobs x"} {
		if _, err := handler.NATS(nc, handler.NATSConfig{Subject: subject}); !errors.Is(err, handler.ErrInvalidConfig) {
			t.Errorf("subject %q: %v, want ErrInvalidConfig", subject, err)
		}
	}
	if _, err := handler.NATS(nil, handler.NATSConfig{Subject: "jobs"}); !errors.Is(err, handler.ErrInvalidConfig) {
		t.Errorf("no connection: %v, want ErrInvalidConfig", err)
	}
	if _, err := handler.NATS(nc, handler.NATSConfig{Subject: "jobs", Timeout: -1}); !errors.Is(err, handler.ErrInvalidConfig) {
		t.Errorf("negative timeout: %v, want ErrInvalidConfig", err)
	}
}
