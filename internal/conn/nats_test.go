package conn

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startNATS runs a NATS server with opts on a random loopback port and
// returns its host:port.
func startNATS(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.Addr().String()
}

var quiet = slog.New(slog.DiscardHandler)

// TestNATSUserPassword connects as the user a URL's user info names, and
// reports a wrong password as a credentials problem without printing it.
func TestNATSUserPassword(t *testing.T) {
	t.Parallel()
	addr := startNATS(t, &server.Options{Users: []*server.User{{Username: "worker", Password: "s3cret"}}})

	nc, err := NATS(NATSConfig{URL: "nats://worker:s3cret@" + addr}, "test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()

	_, err = NATS(NATSConfig{URL: "nats://worker:wrong-pass@" + addr}, "test", quiet)
	if err == nil || !strings.Contains(err.Error(), "check the credentials") || strings.Contains(err.Error(), "wrong-pass") {
		t.Fatalf("a wrong password: err = %v; want a credentials hint without the password", err)
	}
	_, err = NATS(NATSConfig{URL: "nats://" + addr}, "test", quiet)
	if err == nil || !strings.Contains(err.Error(), "check the credentials") {
		t.Fatalf("no credentials: err = %v", err)
	}
}

// TestNATSNkeyFile connects as the user whose public nkey the server
// lists, signing with the seed in nats.nkey_file.
func TestNATSNkeyFile(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	file := filepath.Join(t.TempDir(), "worker.nk")
	if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startNATS(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})

	nc, err := NATS(NATSConfig{URL: "nats://" + addr, NkeyFile: file}, "test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()

	missing := filepath.Join(t.TempDir(), "none.nk")
	if _, err := NATS(NATSConfig{URL: "nats://" + addr, NkeyFile: missing}, "test", quiet); err == nil || !strings.Contains(err.Error(), "nats.nkey_file") {
		t.Fatalf("a missing seed file: err = %v; want it to name nats.nkey_file", err)
	}
	if _, err := NATS(NATSConfig{URL: "nats://" + addr, NkeyFile: file, CredsFile: file}, "test", quiet); err == nil ||
		!strings.Contains(err.Error(), "nats.creds_file and nats.nkey_file") {
		t.Fatalf("both files: err = %v", err)
	}
}

// TestNATSInboxPrefix makes requests through a user who may subscribe only
// under its own inbox prefix: they are answered with nats.inbox_prefix
// set, and refused by the server without it.
func TestNATSInboxPrefix(t *testing.T) {
	t.Parallel()
	addr := startNATS(t, &server.Options{Users: []*server.User{
		{Username: "worker", Password: "w", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"jobs.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_SPILLWAY_INBOX.worker.>"}},
		}},
		{Username: "handler", Password: "h", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Allow: []string{"jobs.>"}},
			Response:  &server.ResponsePermission{MaxMsgs: 1},
		}},
	}})
	h, err := NATS(NATSConfig{URL: "nats://handler:h@" + addr}, "handler", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Subscribe("jobs.email", func(m *nats.Msg) { _ = m.Respond([]byte("done")) }); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}

	w, err := NATS(NATSConfig{URL: "nats://worker:w@" + addr, InboxPrefix: "_SPILLWAY_INBOX.worker"}, "worker", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if in := w.NewInbox(); !strings.HasPrefix(in, "_SPILLWAY_INBOX.worker.") {
		t.Fatalf("inbox %q: want it under _SPILLWAY_INBOX.worker.", in)
	}
	m, err := w.Request("jobs.email", []byte("job"), 5*time.Second)
	if err != nil || string(m.Data) != "done" {
		t.Fatalf("request with the inbox prefix: %v", err)
	}

	plain, err := NATS(NATSConfig{URL: "nats://worker:w@" + addr}, "worker", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Request("jobs.email", []byte("job"), time.Second); err == nil {
		t.Fatal("a request from _INBOX was answered, though the user may not subscribe there")
	}
}

func TestValidInboxPrefix(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"_SPILLWAY_INBOX.worker": true,
		"_INBOX":                 true,
		"a.b-c_d":                true,
		"":                       false,
		"_INBOX.":                false,
		".x":                     false,
		"a..b":                   false,
		"a.*":                    false,
		"a.>":                    false,
		"a*b":                    false,
		"a b":                    false,
		"a\tb":                   false,
	} {
		if got := ValidInboxPrefix(p); got != want {
			t.Errorf("ValidInboxPrefix(%q) = %v, want %v", p, got, want)
		}
	}
	if _, err := NATSOptions(NATSConfig{InboxPrefix: "x.>"}); err == nil || !strings.Contains(err.Error(), "nats.inbox_prefix") {
		t.Errorf("NATSOptions with a wildcard prefix: err = %v", err)
	}
}

// logRecords is a slog handler keeping each record's level and text.
type logRecords struct {
	mu   sync.Mutex
	recs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	l.recs = append(l.recs, s)
	l.mu.Unlock()
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// TestNATSPermissionViolationLogged: a subject the server refuses this
// connection is logged as an error naming the connection and the subject,
// so that a deployment's authorization can be mended.
func TestNATSPermissionViolationLogged(t *testing.T) {
	t.Parallel()
	addr := startNATS(t, &server.Options{Users: []*server.User{{Username: "worker", Password: "w", Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{"jobs.>"}},
	}}}})
	logs := &logRecords{}
	nc, err := NATS(NATSConfig{URL: "nats://worker:w@" + addr}, "spillway-worker", slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("$KV.spillway-pacer.email.paused", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		logs.mu.Lock()
		for _, r := range logs.recs {
			if strings.HasPrefix(r, "ERROR") && strings.Contains(r, "spillway-worker") && strings.Contains(r, `"$KV.spillway-pacer.email.paused"`) {
				logs.mu.Unlock()
				return
			}
		}
		logs.mu.Unlock()
		_ = nc.Flush()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no error logged naming the refused subject; logs: %q", logs.recs)
}
