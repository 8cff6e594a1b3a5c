package e2e

// The reliability suite (docs/reliability.md): authentication, with the real
// admitter binary. A missing or bad API key is 401 and reaches no bucket
// (Redis runs no script, holds no key); wrong NATS or Redis credentials
// make the admitter exit once, at once, with a non-zero code and a line
// that names what failed — without the secret.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
	"github.com/spillway-dev/spillway/internal/testkit/proc"
	"github.com/spillway-dev/spillway/internal/testkit/redistest"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
)

const authAPIKey = "e2e-key-0123456789abcdef"

// authConfig is one queue over the given NATS and Redis URLs, closed on
// a Redis failure.
func authConfig(t *testing.T, natsURL, redisURL, keysFile string) string {
	t.Helper()
	keys := ""
	if keysFile != "" {
		keys = fmt.Sprintf(", api_keys_file: %q", keysFile)
	}
	return writeFile(t, "spillway.yaml", fmt.Sprintf(`
nats: {url: %q}
redis: {url: %q, failure_mode: closed}
http: {listen: "127.0.0.1:0"%s}
queues:
  - name: q
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/m, burst: 2}
      - {key: global, algorithm: token_bucket, rate: 100/s, burst: 100}
    backlog: {capacity: 10, leak_rate: 1/s}
    handler: {http: {url: "http://127.0.0.1:9/never"}}
`, natsURL, redisURL, keys))
}

// redisScripts is the number of script runs Redis has served
// (EVAL, EVALSHA and their _RO forms) and the keys it holds.
func redisScripts(t *testing.T, c *redis.Client) (calls int64, keys int64) {
	t.Helper()
	ctx := context.Background()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			}
		}
	}
	if keys, err = c.DBSize(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	return calls, keys
}

// TestReliabilityAuthNoBucket: the admitter binary with API keys and the
// Redis store. Submissions without a key or with bad ones (short: 500,
// full: 10,000, 8 at a time) are all 401; Redis ran no script and holds
// no key. One good key then runs the script: the measure sees a decision.
func TestReliabilityAuthNoBucket(t *testing.T) {
	srv := queuetest.Start(t)
	rds := redistest.Start(t, redistest.WithOwnProcess())
	keysFile := writeFile(t, "api-keys", authAPIKey+"\n")
	adm := start(t, "admitter", bins.admitter, "--config", authConfig(t, srv.URL(), rds.URL(), keysFile))
	rc := redis.NewClient(&redis.Options{Addr: rds.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)

	calls0, _ := redisScripts(t, rc)
	bad := []map[string]string{
		{},
		{"Authorization": "Bearer wrong-key-0123456789"},
		{"Authorization": "Bearer " + authAPIKey[:len(authAPIKey)-1]},
		{"Authorization": "Bearer " + strings.ToUpper(authAPIKey)},
		{"Authorization": "Basic " + authAPIKey},
		{"X-Api-Key": authAPIKey + "0"},
		{"X-Api-Key": "wrong-key-0123456789"},
	}
	n := scale(500, 10000)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				h := map[string]string{"X-Client": "c" + strconv.Itoa(i)}
				for k, v := range bad[i%len(bad)] {
					h[k] = v
				}
				a := submitHTTP(t, client, adm.addr, "q", h, []byte("x"))
				mu.Lock()
				codes[a.Code]++
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	calls, keys := redisScripts(t, rc)
	good := submitHTTP(t, client, adm.addr, "q", map[string]string{"X-Client": "good", "Authorization": "Bearer " + authAPIKey}, []byte("x"))
	callsGood, keysGood := redisScripts(t, rc)
	figure(t, "%d submissions with a missing or bad API key to the admitter binary (Redis store): answers %v; Redis ran %d scripts and holds %d keys; one good key then: %d, %d script run(s), %d keys",
		n, codes, calls-calls0, keys, good.Code, callsGood-calls, keysGood)
	if codes[http.StatusUnauthorized] != n {
		t.Errorf("answers %v, want all %d 401", codes, n)
	}
	if calls != calls0 || keys != 0 {
		t.Errorf("after the unauthorized submissions Redis ran %d scripts and holds %d keys, want 0 and 0", calls-calls0, keys)
	}
	if good.Code != http.StatusAccepted || callsGood == calls || keysGood == 0 {
		t.Errorf("a good key: %d, %d script runs, %d keys; want 202 with a decision in Redis (the measure is blind otherwise)", good.Code, callsGood-calls, keysGood)
	}
}

// runToExit runs a binary, which must exit on its own within d, and
// returns its exit code, how long it ran and what it wrote.
func runToExit(t *testing.T, d time.Duration, bin string, args ...string) (int, time.Duration, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	proc.SetParentDeathSignal(cmd)
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	if ctx.Err() != nil {
		t.Fatalf("%s still ran %v after it started (it should exit):\n%s", bin, d, out.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %s: %v", bin, err)
	}
	code := 0
	if exit != nil {
		code = exit.ExitCode()
	}
	return code, took, out.String()
}

// authNATS starts an embedded JetStream server that requires credentials:
// a user and password, or a token.
func authNATS(t *testing.T, user, password, token string) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Username: user, Password: password, Authorization: token}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server with authentication not ready within 10s")
	}
	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("nats-server listens on %v", ns.Addr())
	}
	return "127.0.0.1:" + strconv.Itoa(addr.Port)
}

// TestReliabilityAuthWrongCredentials: the admitter binary with wrong NATS
// credentials (user and password, token, none) or a wrong Redis password
// (or none) exits once, within seconds, with a non-zero code and one line
// that names the server and what failed, and does not print the secret.
// With the right ones it starts (the servers do require them).
func TestReliabilityAuthWrongCredentials(t *testing.T) {
	const (
		natsPassword  = "nats-s3cret-password"
		natsToken     = "nats-s3cret-token"
		redisPassword = "redis-s3cret-password"
		wrongPassword = "wrong-s3cret-guess"
	)
	userNATS := authNATS(t, "spillway", natsPassword, "")
	tokenNATS := authNATS(t, "", "", natsToken)
	rds := redistest.Start(t, redistest.WithOwnProcess(), redistest.WithArgs("--requirepass", redisPassword))
	goodRedis := "redis://:" + redisPassword + "@" + rds.Addr() + "/0"
	goodNATS := "nats://spillway:" + natsPassword + "@" + userNATS

	for _, c := range []struct {
		name, nats, redis string
		secret            string   // must not be printed
		want              []string // in the output, any case
		worker            bool     // the worker binary instead of the admitter
	}{
		{"NATS wrong password", "nats://spillway:" + wrongPassword + "@" + userNATS, goodRedis, wrongPassword, []string{"nats", "authorization"}, false},
		{"NATS no credentials", "nats://" + userNATS, goodRedis, "", []string{"nats", "authorization"}, false},
		{"NATS wrong token", "nats://" + wrongPassword + "@" + tokenNATS, goodRedis, wrongPassword, []string{"nats", "authorization"}, false},
		{"Redis wrong password", goodNATS, "redis://:" + wrongPassword + "@" + rds.Addr() + "/0", wrongPassword, []string{"redis", "wrongpass"}, false},
		{"Redis no password", goodNATS, "redis://" + rds.Addr() + "/0", "", []string{"redis", "noauth"}, false},
		{"worker NATS wrong password", "nats://spillway:" + wrongPassword + "@" + userNATS, goodRedis, wrongPassword, []string{"nats", "authorization"}, true},
		{"worker Redis wrong password", goodNATS, "redis://:" + wrongPassword + "@" + rds.Addr() + "/0", wrongPassword, []string{"redis", "wrongpass"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin, args := bins.admitter, []string{"--config", authConfig(t, c.nats, c.redis, "")}
			if c.worker {
				bin, args = bins.worker, append(args, "--metrics-listen", "127.0.0.1:0")
			}
			code, took, out := runToExit(t, 60*time.Second, bin, args...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			figure(t, "exit code %d after %v, %d line(s) of output; last: %s", code, took.Round(time.Millisecond), len(lines), last)
			if code == 0 {
				t.Errorf("exit code 0, want non-zero:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(strings.ToLower(last), w) {
					t.Errorf("the last line %q does not say %q", last, w)
				}
			}
			for _, secret := range []string{c.secret, natsPassword, redisPassword, natsToken} {
				if secret != "" && strings.Contains(out, secret) {
					t.Errorf("the output shows a secret (%s):\n%s", secret, out)
				}
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Errorf("the admitter panicked:\n%s", out)
			}
			if strings.Contains(out, "spillway admitter: http://") || strings.Contains(out, "spillway worker: metrics") {
				t.Errorf("it said it was ready before exiting:\n%s", out)
			}
		})
	}

	// The right credentials: the servers really check them.
	adm := start(t, "admitter", bins.admitter, "--config", authConfig(t, goodNATS, goodRedis, ""))
	client := apitest.Client(t, &http.Client{Timeout: 10 * time.Second})
	t.Cleanup(client.CloseIdleConnections)
	if a := submitHTTP(t, client, adm.addr, "q", map[string]string{"X-Client": "c"}, nil); a.Code != http.StatusAccepted {
		t.Errorf("with the right credentials: %d %+v, want 202", a.Code, a.Reply)
	}
	adm2 := start(t, "admitter-token", bins.admitter, "--config", authConfig(t, "nats://"+natsToken+"@"+tokenNATS, goodRedis, ""))
	if a := submitHTTP(t, client, adm2.addr, "q", map[string]string{"X-Client": "d"}, nil); a.Code != http.StatusAccepted {
		t.Errorf("with the right token: %d %+v, want 202", a.Code, a.Reply)
	}
	for _, p := range []*process{adm, adm2} {
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
}
