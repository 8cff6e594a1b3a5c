package handler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/retry"
)

func TestNewPicksTheConfiguredHandler(t *testing.T) {
	t.Parallel()
	srv, got := capture(t, nil)
	h, err := handler.New(handler.Config{HTTP: &handler.HTTPConfig{URL: srv.URL}}, nil, nil, nil)
	if err != nil {
		t.Fatalf("New(http): %v", err)
	}
	if err := h(t.Context(), testJob()); err != nil {
		t.Fatalf("http handler: %v", err)
	}
	<-got

	ns := queuetest.Start(t)
	nc := ns.Connect(t)
	asked := respond(t, ns.Connect(t), "jobs.email", replyWith(nil, ""))
	h, err = handler.New(handler.Config{NATS: &handler.NATSConfig{Subject: "jobs.email"}}, nc, nil, nil)
	if err != nil {
		t.Fatalf("New(nats): %v", err)
	}
	if err := h(t.Context(), testJob()); err != nil {
		t.Fatalf("nats handler: %v", err)
	}
	<-asked

	var logs bytes.Buffer
	h, err = handler.New(handler.Config{Log: true}, nil, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("New(log): %v", err)
	}
	if err := h(t.Context(), testJob()); err != nil || logs.Len() == 0 {
		t.Fatalf("log handler: %v, logged %q", err, logs.String())
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	if _, err := handler.New(handler.Config{}, nil, nil, nil); !errors.Is(err, handler.ErrNoHandler) {
		t.Errorf("no handler: %v, want ErrNoHandler", err)
	}
	two := handler.Config{HTTP: &handler.HTTPConfig{URL: "http://example.com"}, Log: true}
	if _, err := handler.New(two, nil, nil, nil); !errors.Is(err, handler.ErrInvalidConfig) {
		t.Errorf("two handlers: %v, want ErrInvalidConfig", err)
	}
	if _, err := handler.New(handler.Config{NATS: &handler.NATSConfig{Subject: "jobs"}}, nil, nil, nil); !errors.Is(err, handler.ErrInvalidConfig) {
		t.Errorf("nats without a connection: %v, want ErrInvalidConfig", err)
	}
}

func TestLogNeverLogsTheKey(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	j := testJob()
	if err := handler.Log(slog.New(slog.NewTextHandler(&logs, nil)))(t.Context(), j); err != nil {
		t.Fatalf("Log: %v", err)
	}
	line := logs.String()
	for _, want := range []string{"job_id=" + testID, "queue=email", "attempt=3", "payload_bytes=17", "key_token=" + queue.KeyToken(j.Key)} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, j.Key) {
		t.Errorf("log %q holds the key %q", line, j.Key)
	}
}

func ExampleHTTP() {
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer downstream.Close()

	h, err := handler.HTTP(handler.HTTPConfig{URL: downstream.URL}, nil)
	if err != nil {
		panic(err)
	}
	err = h(context.Background(), &queue.Job{ID: "01890a5d-ac96-774b-bcce-b302099a8057", Queue: "email", Attempt: 1})
	d, ok := retry.RetryAfter(err)
	fmt.Println(retry.IsPermanent(err), d, ok)
	// Output: false 30s true
}

// TestValidateNamesFields checks that Validate reports every problem as a
// *FieldError named as the configuration file names the setting, which the
// configuration uses to place it at its line.
func TestValidateNamesFields(t *testing.T) {
	t.Parallel()
	cfg := handler.Config{
		HTTP: &handler.HTTPConfig{URL: "ftp://u:secret@x", Timeout: -1, Headers: map[string]string{"Spillway-Priority": "high"}},
		NATS: &handler.NATSConfig{Subject: "jobs.>"},
	}
	err := cfg.Validate()
	if !errors.Is(err, handler.ErrInvalidConfig) {
		t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
	}
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		fe, ok := errors.AsType[*handler.FieldError](e)
		if !ok {
			t.Fatalf("%v is not a *FieldError", e)
		}
		got = append(got, fe.Field+": "+fe.Problem())
	}
	want := []string{
		`http.url: expected an http:// or https:// URL such as "http://127.0.0.1:9000/send", got "ftp://x"`,
		`http.timeout: expected a duration ≥ 0, got "-1ns"`,
		`http.headers.Spillway-Priority: header Spillway-Priority is set by the worker for every job and cannot be configured`,
		`nats.subject: expected a NATS subject such as "jobs.email" (no spaces or wildcards), got "jobs.>"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := (handler.Config{Log: true}).Validate(); err != nil {
		t.Errorf("log handler: %v", err)
	}
}
