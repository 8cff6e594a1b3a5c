package worker_test

// Tests with workers in processes of their own: the test binary started
// again with SPILLWAY_TEST_WORKER set runs one worker (childMain) instead of
// the tests, and writes what it does to a ledger file that the test reads.
// Those processes can be killed with SIGKILL mid-job, and several of them
// share one leak rate through Redis.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/spillway-dev/spillway/internal/testkit/proc"
	"github.com/spillway-dev/spillway/pkg/bucket/redisbucket"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
)

const childEnv = "SPILLWAY_TEST_WORKER"

// childConfig is what a worker process is told, as JSON in childEnv.
type childConfig struct {
	NATS        string
	Redis       string // shared pacer; "" for one in the process
	Queue       queue.Config
	Concurrency int
	AckWait     time.Duration
	MaxAttempts int
	Work        time.Duration // each job takes Work to 2×Work
	Ledger      string
}

// childMain runs one worker until SIGTERM and returns the exit code.
// Ledger lines (one write each, O_APPEND, so lines from concurrent
// processes never interleave and survive a SIGKILL):
//
//	start <job id> <pid> <unix ns> <attempt>
//	done <job id> <pid>             (the handler finished its work)
//	ack <job id> <pid>
//	release <job id> <pid> <unix ns> <BACKLOG seq>
//	dead <job id> <pid>
func childMain(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child worker: config:", err)
		return 2
	}
	if err := runChild(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child worker:", err)
		return 1
	}
	return 0
}

func runChild(cfg childConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ledger, err := os.OpenFile(cfg.Ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer ledger.Close()
	pid := os.Getpid()
	write := func(format string, args ...any) {
		if _, err := ledger.WriteString(fmt.Sprintf(format, args...) + "\n"); err != nil {
			fmt.Fprintln(os.Stderr, "child worker: ledger:", err)
		}
	}
	nc, err := nats.Connect(cfg.NATS, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	wc := worker.WorkerConfig{
		Queue: cfg.Queue, Concurrency: cfg.Concurrency, AckWait: cfg.AckWait,
		Retry: retry.Policy{MaxAttempts: cfg.MaxAttempts, Initial: 100 * time.Millisecond, Max: time.Second},
		Observe: func(e worker.Event) {
			switch e.Kind {
			case worker.Succeeded:
				write("ack %s %d", e.Job.ID, pid)
			case worker.Released:
				write("release %s %d %d %d", e.Job.ID, pid, time.Now().UnixNano(), e.Sequence)
			case worker.DeadLettered:
				if e.Job != nil {
					write("dead %s %d", e.Job.ID, pid)
				}
			}
		},
	}
	if cfg.Redis != "" {
		opts, err := redis.ParseURL(cfg.Redis)
		if err != nil {
			return err
		}
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		store, err := redisbucket.New(rdb)
		if err != nil {
			return err
		}
		if wc.Pacer, err = pace.NewPacer(store, cfg.Queue.Name, cfg.Queue.LeakRate); err != nil {
			return err
		}
	}
	w, err := worker.NewWorker(js, wc, func(ctx context.Context, j *queue.Job) error {
		write("start %s %d %d %d", j.ID, pid, time.Now().UnixNano(), j.Attempt)
		if cfg.Work > 0 {
			time.Sleep(cfg.Work + rand.N(cfg.Work))
		}
		write("done %s %d", j.ID, pid)
		return nil
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// child is a worker process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(t *testing.T, cfg childConfig) *child {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(t.TempDir(), "worker.log"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), os.Args[0], "-test.run=^$") // stopped in Cleanup, not by a context
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	proc.SetParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			if out, err := os.ReadFile(logf.Name()); err == nil && len(out) > 0 {
				t.Logf("worker %d said:\n%s", cmd.Process.Pid, out)
			}
		}
	})
	return c
}

func (c *child) kill9() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// ledger is every line the worker processes wrote, parsed.
type ledger struct {
	starts   map[string][]ledgerStart
	acks     map[string]int
	done     map[string]int
	dead     map[string]int
	releases map[string]ledgerRelease
}

type ledgerStart struct {
	pid     int
	at      time.Time
	attempt int
}

type ledgerRelease struct {
	pid int
	at  time.Time
	seq uint64
}

func readLedger(t *testing.T, path string) *ledger {
	t.Helper()
	l := &ledger{starts: map[string][]ledgerStart{}, acks: map[string]int{}, done: map[string]int{}, dead: map[string]int{}, releases: map[string]ledgerRelease{}}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return l
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("ledger %s: %q: %v", path, sc.Text(), err)
		}
		return n
	}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 5 && f[0] == "start":
			l.starts[f[1]] = append(l.starts[f[1]], ledgerStart{pid: int(num(f[2])), at: time.Unix(0, num(f[3])), attempt: int(num(f[4]))})
		case len(f) == 3 && f[0] == "ack":
			l.acks[f[1]]++
		case len(f) == 3 && f[0] == "done":
			l.done[f[1]]++
		case len(f) == 3 && f[0] == "dead":
			l.dead[f[1]]++
		case len(f) == 5 && f[0] == "release":
			l.releases[f[1]] = ledgerRelease{pid: int(num(f[2])), at: time.Unix(0, num(f[3])), seq: uint64(num(f[4]))}
		default:
			t.Fatalf("ledger %s: bad line %q", path, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

// inFlight is how many jobs pid started and did not ack.
func (l *ledger) inFlight(pid int) int {
	started := map[string]bool{}
	for id, ss := range l.starts {
		for _, s := range ss {
			if s.pid == pid {
				started[id] = true
			}
		}
	}
	n := 0
	for id := range started {
		if l.acks[id] == 0 {
			n++
		}
	}
	return n
}

// waitLedger polls the ledger until cond holds, failing after d.
func waitLedger(t *testing.T, path string, d time.Duration, what string, cond func(*ledger) bool) *ledger {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l := readLedger(t, path)
		if cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
