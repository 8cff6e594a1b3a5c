package natsroles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admitterd"
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/internal/workerd"
	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server: a file store opened by a request racing the
		// embedded server's shutdown can outlive it (as in test/e2e).
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"))
}

// roles are the users of auth.conf, each with the inbox prefix the
// shipped deployments give it ("" = NATS's own _INBOX).
var roles = map[string]string{
	"admitter": "_SPILLWAY_INBOX.admitter",
	"worker":   "_SPILLWAY_INBOX.worker",
	"operator": "_SPILLWAY_INBOX.operator",
	"producer": "",
	"handler":  "",
}

func password(role string) string { return "test-" + role + "-secret" }

// startShipped starts nats-server from the shipped cluster file, changed
// only where a test must: a random loopback port, no monitoring port, a
// temporary store, no cluster. It returns the client address.
func startShipped(t *testing.T) string {
	t.Helper()
	t.Setenv("SERVER_NAME", "natsroles")
	for role := range roles {
		t.Setenv("SPILLWAY_NATS_"+strings.ToUpper(role)+"_PASSWORD", password(role))
	}
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "../../deploy/nats/cluster/nats.conf")
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(opts.Users) != len(roles) {
		t.Fatalf("%s: %d users, want the %d roles", path, len(opts.Users), len(roles))
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.PidFile = ""
	opts.ServerName = "natsroles"
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.Addr().(*net.TCPAddr).String()
}

// url is the server's URL with role's user and password.
func url(addr, role string) string {
	return fmt.Sprintf("nats://%s:%s@%s", role, password(role), addr)
}

// violations collects the errors a connection's server reports, the
// permissions violations among them.
type violations struct {
	mu   sync.Mutex
	errs []string
	seen chan struct{}
}

func newViolations() *violations { return &violations{seen: make(chan struct{}, 1)} }

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
	select {
	case v.seen <- struct{}{}:
	default:
	}
}

// waitFor waits until a reported error mentions each of subjects.
func (v *violations) waitFor(t *testing.T, what string, subjects ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		v.mu.Lock()
		var missing []string
		for _, s := range subjects {
			if !slices.ContainsFunc(v.errs, func(e string) bool {
				return strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, `"`+s+`"`)
			}) {
				missing = append(missing, s)
			}
		}
		got := slices.Clone(v.errs)
		v.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		select {
		case <-v.seen:
		case <-deadline:
			t.Fatalf("%s: no permissions violation reported for %q; the server reported %q", what, missing, got)
		}
	}
}

// connect connects as role with the inbox prefix the deployments give it,
// reporting the server's errors to v.
func connect(t *testing.T, addr, role string, v *violations) *nats.Conn {
	t.Helper()
	opts, err := conn.NATSOptions(conn.NATSConfig{InboxPrefix: roles[role]})
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, nats.Name("natsroles-"+role), nats.ErrorHandler(v.handler))
	nc, err := nats.Connect(url(addr, role), opts...)
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// recorder is a slog handler keeping every record at Warn or above, for
// the permissions violations Spillway's own processes log.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, b.String())
	r.mu.Unlock()
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if strings.Contains(strings.ToLower(m), "permission") {
			out = append(out, m)
		}
	}
	return out
}

// spillwayConfig is the configuration of a process of role: its user in
// nats.url and its inbox prefix. Queue email's first job goes to READY,
// the next ones to the backlog, and every job to the handler service over
// NATS.
func spillwayConfig(t *testing.T, addr, role string) *config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`
nats: {url: %q, inbox_prefix: %q}
http: {listen: "127.0.0.1:0"}
worker: {concurrency: 2, grace_period: 5s, ack_wait: 10s}
queues:
  - name: email
    limits: [{key: global, algorithm: token_bucket, rate: 1/m, burst: 1}]
    backlog: {capacity: 100, leak_rate: 50/s, pushback: key}
    retry: {max_attempts: 3, initial: 100ms, max: 1s}
    handler: {nats: {subject: jobs.email, timeout: 5s}}
    concurrency: [{name: all, key: global, max: 1}]   # the worker takes and gives back key slots
`, url(addr, role), roles[role])
	cfg, err := config.LoadBytes(role+".yaml", []byte(yaml), nil, config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRoles runs Spillway under the shipped roles: jobs submitted by a
// producer through the door reach the handler service and succeed, the
// producer reads their status, an operator lists the queues' streams,
// pauses and resumes a queue and opens its dead letters, and neither the
// admitter nor the worker meets a permissions violation on the way.
func TestRoles(t *testing.T) {
	addr := startShipped(t)
	logs := &recorder{}
	log := slog.New(logs)
	t.Cleanup(func() { // after the processes stop, and on a failure too
		if vs := logs.violations(); len(vs) > 0 {
			t.Errorf("the admitter or the worker met permissions violations:\n%s", strings.Join(vs, "\n"))
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// The handler service answers every job "ok" (no status), saying it
	// cost nothing: the worker asks the admitter to settle its cost. But
	// the first one is answered busy: the worker pauses its key
	// (pushback: key) in the keys' pause bucket, and the job runs again
	// after the pause.
	hv := newViolations()
	hc := connect(t, addr, "handler", hv)
	var handled sync.Map
	var busy sync.Once
	if _, err := hc.QueueSubscribe("jobs.email", "mailer", func(m *nats.Msg) {
		pushed := false
		busy.Do(func() { pushed = true })
		if pushed {
			r := nats.NewMsg(m.Reply)
			r.Header.Set(spillway.HeaderStatus, spillway.HandlerBusy)
			_ = m.RespondMsg(r)
			return
		}
		handled.Store(m.Header.Get(spillway.HeaderJobID), true)
		r := nats.NewMsg(m.Reply)
		r.Header.Set(spillway.HeaderCostActual, "0")
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}

	adm, err := admitterd.Start(ctx, admitterd.Options{Config: spillwayConfig(t, addr, "admitter"), Logger: log})
	if err != nil {
		t.Fatalf("the admitter as user admitter: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = adm.Shutdown(sctx)
	})

	wctx, wcancel := context.WithCancel(ctx)
	wp, err := workerd.Connect(wctx, spillwayConfig(t, addr, "worker"), log)
	if err != nil {
		t.Fatalf("the worker as user worker: %v", err)
	}
	workerDone := make(chan error, 1)
	go func() { workerDone <- wp.Run(wctx, workerd.Options{}, nil) }()
	t.Cleanup(func() {
		wcancel()
		if err := <-workerDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
		wp.Close()
	})

	// A producer submits through the door and reads the status.
	pv := newViolations()
	pc := connect(t, addr, "producer", pv)
	c, err := client.NewNATS(pc, client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	verdicts := map[spillway.Status]int{}
	for i := range 3 {
		a, err := c.Submit(ctx, "email", fmt.Appendf(nil, "job %d", i))
		if err != nil {
			t.Fatalf("producer's submission %d: %v", i, err)
		}
		ids = append(ids, a.ID)
		verdicts[a.Verdict]++
	}
	if verdicts[spillway.Admitted] == 0 || verdicts[spillway.Queued] == 0 {
		t.Errorf("verdicts %v: want READY and the backlog both used (burst 1)", verdicts)
	}
	for _, id := range ids {
		waitUntil(t, 30*time.Second, "job "+id+" succeeded, read by the producer", func() (bool, string) {
			j, err := c.Status(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			return j.State == spillway.StateSucceeded, string(j.State)
		})
		if _, ok := handled.Load(id); !ok {
			t.Errorf("job %s succeeded without reaching the handler service", id)
		}
	}

	// An operator lists the queues' streams, pauses and resumes, and
	// opens the dead letters.
	ov := newViolations()
	js, err := jetstream.New(connect(t, addr, "operator", ov))
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(queue.SubjectRoot+">"))
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		t.Fatalf("operator: listing streams: %v", err)
	}
	for _, d := range []queue.Destination{queue.Ready, queue.Backlog, queue.Dead} {
		if !slices.Contains(streams, queue.StreamName("email", d)) {
			t.Errorf("operator: streams %q lack %s", streams, queue.StreamName("email", d))
		}
	}
	for _, paused := range []bool{true, false} {
		if err := pace.SetPause(ctx, js, "email", 1, pace.PauseState{Paused: paused, At: time.Now(), By: "natsroles"}); err != nil {
			t.Fatalf("operator: pause %v: %v", paused, err)
		}
		st, err := pace.ReadPause(ctx, js, "email")
		if err != nil || st.Paused != paused {
			t.Fatalf("operator: read pause: %+v %v, want paused %v", st, err, paused)
		}
	}
	if _, err := admin.OpenDeadLetters(ctx, js, "email"); err != nil {
		t.Fatalf("operator: dead letters: %v", err)
	}

	for name, v := range map[string]*violations{"handler": hv, "producer": pv, "operator": ov} {
		v.mu.Lock()
		if len(v.errs) > 0 {
			t.Errorf("%s: the server reported %q", name, v.errs)
		}
		v.mu.Unlock()
	}
}

// TestProducerRefused checks what a producer's user may not do: publish
// into a queue's streams or the grants, call the JetStream API, read or
// write any bucket, or listen where internal traffic flows.
func TestProducerRefused(t *testing.T) {
	addr := startShipped(t)
	ctx := t.Context()

	// The streams and buckets exist, made by an admitter's and a
	// worker's own users.
	ov := newViolations()
	ojs, err := jetstream.New(connect(t, addr, "operator", ov))
	if err != nil {
		t.Fatal(err)
	}
	ajs, err := jetstream.New(connect(t, addr, "admitter", newViolations()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := spillwayConfig(t, addr, "admitter")
	qc := cfg.Queues[0].Backlog
	if err := queue.EnsureStreams(ctx, ajs, qc); err != nil {
		t.Fatalf("admitter: streams: %v", err)
	}
	if _, err := jobstatus.Open(ctx, ajs, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := admit.OpenIdempotency(ctx, ajs, time.Hour, 1, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := overrides.Open(ctx, ajs, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pace.OpenPacerBucket(ctx, ojs, 1); err != nil {
		t.Fatal(err)
	}

	pv := newViolations()
	pc := connect(t, addr, "producer", pv)

	// Publishing: a forged job into READY and the backlog, a grant, a
	// pause, a limit override, a status record, an idempotency key, the
	// JetStream API (stream info, purge, a direct get of a bucket's
	// entry), the system account.
	buckets := []string{pace.PacerBucket, overrides.Bucket}
	for i := range queue.KVShards {
		buckets = append(buckets, queue.ShardBucket(jobstatus.Bucket, i), queue.ShardBucket(admit.IdempotencyBucket, i))
	}
	token := queue.KeyToken("k")
	published := []string{
		queue.SubjectRoot + "ready.email." + token,
		queue.SubjectRoot + "backlog.email." + token,
		queue.SubjectRoot + "dead.email." + token,
		queue.GrantSubject("email"),
		"$JS.API.STREAM.INFO." + queue.StreamName("email", queue.Ready),
		"$JS.API.STREAM.NAMES",
		"$JS.API.STREAM.PURGE." + queue.StreamName("email", queue.Backlog),
		"$JS.API.CONSUMER.CREATE." + queue.StreamName("email", queue.Ready),
		"$JS.ACK." + queue.StreamName("email", queue.Ready) + ".spillway-ready.1.1.1.1.0",
		"$SYS.REQ.SERVER.PING",
		"jobs.email",
	}
	for _, b := range buckets {
		published = append(published,
			"$KV."+b+".email.paused",
			"$JS.API.DIRECT.GET.KV_"+b+".$KV."+b+".email.paused",
			"$JS.API.STREAM.INFO.KV_"+b)
	}
	for _, s := range published {
		if err := pc.Publish(s, []byte(`{"paused":true}`)); err != nil {
			t.Fatalf("publish %s: %v", s, err)
		}
	}
	if err := pc.Flush(); err != nil {
		t.Fatal(err)
	}
	pv.waitFor(t, "producer publishing", published...)

	// Subscribing where internal traffic flows.
	subscribed := []string{"_SPILLWAY_INBOX.>", "_SPILLWAY_INBOX.worker.>", "$JS.>", "$KV.>", "spillway.>", "spillway.backlog.>", "spillway.ready.email.*", "jobs.>", ">"}
	for _, s := range subscribed {
		if _, err := pc.SubscribeSync(s); err != nil {
			t.Fatalf("subscribe %s: %v", s, err)
		}
	}
	if err := pc.Flush(); err != nil {
		t.Fatal(err)
	}
	pv.waitFor(t, "producer subscribing", subscribed...)

	// Through the JetStream and KV clients: refused too, and nothing
	// they tried to write is there.
	pjs, err := jetstream.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := pjs.Stream(short, queue.StreamName("email", queue.Ready)); err == nil {
		t.Error("producer: JetStream stream info answered")
	}
	if _, err := pjs.Publish(short, queue.SubjectRoot+"ready.email."+token, []byte("forged")); err == nil {
		t.Error("producer: a forged job was stored in READY")
	}
	for _, d := range []queue.Destination{queue.Ready, queue.Backlog, queue.Dead} {
		s, err := ojs.Stream(ctx, queue.StreamName("email", d))
		if err != nil {
			t.Fatal(err)
		}
		if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
			t.Errorf("%s holds %d messages (%v), want none: a producer's publish was stored", queue.StreamName("email", d), info.State.Msgs, err)
		}
	}
	if st, err := pace.ReadPause(ctx, ojs, "email"); err != nil || st.Paused {
		t.Errorf("pause state %+v (%v): a producer paused the queue", st, err)
	}
	kv, err := ojs.KeyValue(ctx, overrides.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.ListKeys(ctx); err == nil {
		for k := range keys.Keys() {
			t.Errorf("overrides bucket holds %q: a producer wrote it", k)
		}
	}
}

// waitUntil polls cond until it holds or d passes; cond's string says
// what it saw, for the failure message.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v (last: %s)", what, d, last)
}
