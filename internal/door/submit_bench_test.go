package door_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/admit/admittest"
	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportPerJob reports jobs/s and the CPU µs per job of the whole process
// (door, admitter, embedded nats-server and the callers) since cpu0: on a
// shared machine the CPU per job moves less than the throughput.
func reportPerJob(b *testing.B, cpu0 time.Duration, jobs int64) {
	b.Helper()
	if jobs == 0 {
		b.Fatal("no job answered")
	}
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(jobs), "cpu-µs/job")
}

// BenchmarkNATSSubmit is single submissions through the NATS door in one
// process (embedded JetStream, memory store, no job-status records), 64
// callers over one connection, 256-byte payloads over 1000 client keys,
// as scripts/bench-admission loads the running system.
func BenchmarkNATSSubmit(b *testing.B) {
	ns := queuetest.Start(b)
	core := admittest.NewCore(b, ns.Connect(b), benchConfig, nil)
	a, err := admit.New(core.Config, core.Options())
	if err != nil {
		b.Fatal(err)
	}
	d := door.NewNATS(ns.Connect(b), a, nil)
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Stop(b.Context()) })
	nc := ns.Connect(b)
	payload := bytes.Repeat([]byte("ABCD"), 64)
	var jobs, seq atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS callers: 64 on two cores
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := &nats.Msg{Subject: spillway.SubmitPrefix + "q", Data: payload,
				Header: nats.Header{"X-Client": {"c" + strconv.FormatInt(seq.Add(1)%1000, 10)}}}
			resp, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				b.Error(err)
				return
			}
			var rep spillway.SubmitReply
			if err := json.Unmarshal(resp.Data, &rep); err != nil || rep.Status != spillway.Admitted {
				b.Errorf("reply %s (%v)", resp.Data, err)
				return
			}
			jobs.Add(1)
		}
	})
	reportPerJob(b, cpu0, jobs.Load())
}

// BenchmarkHTTPSubmitCPU is BenchmarkNATSSubmit over the HTTP door (64
// callers, a connection each), with the CPU per job.
func BenchmarkHTTPSubmitCPU(b *testing.B) {
	bb := setupB(b, benchConfig)
	payload := bytes.Repeat([]byte("ABCD"), 64)
	var jobs, seq atomic.Int64
	b.SetParallelism(32)
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, bb.srv.URL+"/v1/queues/q/jobs", bytes.NewReader(payload))
			req.Header.Set("X-Client", "c"+strconv.FormatInt(seq.Add(1)%1000, 10))
			resp, err := bb.client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
			jobs.Add(1)
		}
	})
	reportPerJob(b, cpu0, jobs.Load())
}
