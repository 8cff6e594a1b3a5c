package loadgen

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("loadgen: invalid config")

// DefaultMaxOutstanding bounds an open loop's unanswered jobs when
// Config.MaxOutstanding is 0.
const DefaultMaxOutstanding = 10_000

// Verdict is what became of one submission.
type Verdict uint8

// Verdicts, as the admitter gives them; Failed is every error.
const (
	Admitted Verdict = iota
	Queued
	Rejected
	Failed
)

var verdictNames = [...]string{"admitted", "queued", "rejected", "error"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", v)
}

// Outcome is a Target's answer to one submission. Reason says why a job
// was rejected or failed, in a few words drawn from a small set (the
// problem type "queue-full", "timeout", "http 503 unavailable"): reasons
// are counted, so they must not hold ids or messages.
type Outcome struct {
	Verdict Verdict
	Reason  string
}

// Request is one submission: its number in the run, from 0, and the client
// key it is sent under ("" without Config.Keys).
type Request struct {
	Seq int64
	Key string
}

// Target submits one job and classifies the answer. Submit is called from
// many goroutines at once. When ctx ends the Target should give up and
// return at once; such outcomes are not counted.
type Target interface {
	Submit(ctx context.Context, r Request) Outcome
}

// TargetFunc makes a function a Target.
type TargetFunc func(ctx context.Context, r Request) Outcome

// Submit calls f.
func (f TargetFunc) Submit(ctx context.Context, r Request) Outcome { return f(ctx, r) }

// Config describes a run. Exactly one of Callers and Rate is set, and at
// least one of Duration and Count.
type Config struct {
	// Target receives the jobs.
	Target Target
	// Callers runs a closed loop of this many callers, each sending its
	// next job when its last one is answered.
	Callers int
	// Rate runs an open loop: Rate.Count jobs every Rate.Per, on a fixed
	// schedule whatever the answers.
	Rate bucket.Rate
	// MaxOutstanding bounds an open loop's unanswered jobs (default
	// DefaultMaxOutstanding). A job due while the bound is reached waits
	// for a slot and counts as Late; its latency includes the wait.
	MaxOutstanding int
	// SpinWait (open loop) is how long before each job's due time the
	// sender stops sleeping and busy-waits instead (default 0: it only
	// sleeps). Timers wake up to about a millisecond late, and an open
	// loop charges that to every latency; 1ms of spinning makes sends
	// accurate to microseconds at the cost of a busy CPU.
	SpinWait time.Duration
	// Duration is how long jobs are sent after the warm-up (0: no limit
	// but Count).
	Duration time.Duration
	// Count is how many jobs are sent after the warm-up (0: no limit but
	// Duration). With both, whichever comes first ends the run.
	Count int64
	// Warmup is a time at the start whose jobs are sent but not measured
	// (default 0).
	Warmup time.Duration
	// Keys are client keys given to requests in turn (default none).
	Keys []string
	// Progress, if set, is called every ProgressEvery (default 1s) while
	// the run lasts, on a goroutine of its own.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Validate reports the first field that cannot be used.
func (c Config) Validate() error {
	switch {
	case c.Target == nil:
		return fmt.Errorf("%w: no target", ErrInvalidConfig)
	case c.Callers < 0:
		return fmt.Errorf("%w: callers %d: must be ≥ 1", ErrInvalidConfig, c.Callers)
	case c.Callers > 0 && c.Rate != (bucket.Rate{}):
		return fmt.Errorf("%w: both callers (closed loop) and rate (open loop): choose one", ErrInvalidConfig)
	case c.Callers == 0 && (c.Rate.Count <= 0 || c.Rate.Per <= 0):
		return fmt.Errorf("%w: need callers (closed loop) or a rate such as 100/s (open loop)", ErrInvalidConfig)
	case c.MaxOutstanding < 0:
		return fmt.Errorf("%w: max outstanding %d: must be ≥ 1", ErrInvalidConfig, c.MaxOutstanding)
	case c.Duration < 0 || c.Count < 0 || c.Warmup < 0:
		return fmt.Errorf("%w: duration, count and warmup must not be negative", ErrInvalidConfig)
	case c.Duration == 0 && c.Count == 0:
		return fmt.Errorf("%w: need a duration or a count, or the run never ends", ErrInvalidConfig)
	case c.SpinWait < 0:
		return fmt.Errorf("%w: spin wait %v: must not be negative", ErrInvalidConfig, c.SpinWait)
	case c.ProgressEvery < 0:
		return fmt.Errorf("%w: progress interval %v: must be positive", ErrInvalidConfig, c.ProgressEvery)
	}
	return nil
}

// Counts are the measured verdicts.
type Counts struct {
	Admitted, Queued, Rejected, Errors int64
	// RejectedBy and ErrorsBy split rejections and errors by reason.
	RejectedBy map[string]int64
	ErrorsBy   map[string]int64
}

func (c *Counts) add(o Outcome) {
	switch o.Verdict {
	case Admitted:
		c.Admitted++
	case Queued:
		c.Queued++
	case Rejected:
		c.Rejected++
		if c.RejectedBy == nil {
			c.RejectedBy = map[string]int64{}
		}
		c.RejectedBy[o.Reason]++
	default:
		c.Errors++
		if c.ErrorsBy == nil {
			c.ErrorsBy = map[string]int64{}
		}
		c.ErrorsBy[o.Reason]++
	}
}

func (c Counts) clone() Counts {
	c.RejectedBy = maps.Clone(c.RejectedBy)
	c.ErrorsBy = maps.Clone(c.ErrorsBy)
	return c
}

// Total is the number of answers counted.
func (c Counts) Total() int64 { return c.Admitted + c.Queued + c.Rejected + c.Errors }

// Report is the outcome of a run. Every figure but Warmup leaves out the
// warm-up.
type Report struct {
	// Elapsed is the measured time: from the end of the warm-up to the
	// last answer.
	Elapsed time.Duration
	// Sent is how many jobs were sent, Counts how they were answered.
	Sent   int64
	Counts Counts
	// Throughput is answers per second over Elapsed.
	Throughput float64
	// Latency holds every answer's latency in nanoseconds: from the send
	// in a closed loop, from the scheduled time in an open loop.
	Latency *Histogram
	// Late (open loop) is how many jobs were sent after their scheduled
	// time because MaxOutstanding answers were awaited. Unsent is how
	// many were due before the run ended but never sent for that reason.
	// MaxSendLag is the largest delay of a send after its schedule, for
	// whatever reason (the bound, or a generator that cannot keep up).
	Late, Unsent int64
	MaxSendLag   time.Duration
	// MaxOutstanding is the most jobs that awaited an answer at once.
	MaxOutstanding int64
	// Warmup is how many answers came to jobs sent during the warm-up.
	Warmup int64
	// Interrupted: the context ended before the run did. Canceled is
	// how many jobs were then abandoned unanswered (not counted).
	Interrupted bool
	Canceled    int64
}

// Progress is a run's state, reported every Config.ProgressEvery.
type Progress struct {
	Elapsed     time.Duration // since the start, warm-up included
	Warmup      bool          // still warming up
	Sent        int64         // jobs sent, warm-up included
	Answered    int64         // answers, warm-up included
	Outstanding int64
	// Rate is answers per second since the last report.
	Rate float64
	// P99 is the measured latencies' 99th percentile so far.
	P99    time.Duration
	Counts Counts
	Late   int64
}

// Run sends jobs as cfg says until the duration passes, the count is sent
// or ctx ends, waits for the answers to what was sent, and reports. When
// ctx ends, jobs awaiting answers are abandoned and the report covers what
// was answered, with Interrupted set; only an invalid cfg is an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxOutstanding == 0 {
		cfg.MaxOutstanding = DefaultMaxOutstanding
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = time.Second
	}
	r := &runner{cfg: cfg, ctx: ctx, rep: &Report{Latency: &Histogram{}}}
	r.start = time.Now()
	r.measureFrom = r.start.Add(cfg.Warmup)
	if cfg.Duration > 0 {
		r.end = r.measureFrom.Add(cfg.Duration)
	}

	stopProgress := r.progress()
	if cfg.Callers > 0 {
		r.closedLoop()
	} else {
		r.openLoop()
	}
	stopProgress()

	rep := r.rep
	rep.Interrupted = ctx.Err() != nil
	rep.Sent = r.measuredSent.Load()
	rep.MaxOutstanding = r.maxOutstanding.Load()
	if !r.lastAnswer.IsZero() {
		rep.Elapsed = r.lastAnswer.Sub(r.measureFrom)
	}
	if rep.Elapsed > 0 {
		rep.Throughput = float64(rep.Counts.Total()) / rep.Elapsed.Seconds()
	}
	return rep, nil
}

type runner struct {
	cfg                     Config
	ctx                     context.Context
	start, measureFrom, end time.Time // end is zero without a duration

	seq            atomic.Int64 // requests made, warm-up included
	measuredSent   atomic.Int64
	answered       atomic.Int64
	outstanding    atomic.Int64
	maxOutstanding atomic.Int64

	mu         sync.Mutex // guards rep and lastAnswer
	rep        *Report
	lastAnswer time.Time
}

func (r *runner) request() Request {
	seq := r.seq.Add(1) - 1
	req := Request{Seq: seq}
	if n := int64(len(r.cfg.Keys)); n > 0 {
		req.Key = r.cfg.Keys[seq%n]
	}
	return req
}

// submit sends req and records its answer, its latency counted from
// since.
func (r *runner) submit(req Request, since time.Time, measured bool) {
	n := r.outstanding.Add(1)
	for m := r.maxOutstanding.Load(); n > m && !r.maxOutstanding.CompareAndSwap(m, n); m = r.maxOutstanding.Load() {
	}
	var o Outcome
	var jobs []Outcome // a batch's (batch.go)
	if jt, ok := r.cfg.Target.(JobsTarget); ok {
		if jobs = jt.SubmitJobs(r.ctx, req); jobs == nil {
			o = Outcome{Failed, "canceled"}
		}
	} else {
		o = r.cfg.Target.Submit(r.ctx, req)
	}
	now := time.Now()
	r.outstanding.Add(-1)
	r.answered.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ctx.Err() != nil && o.Verdict == Failed:
		r.rep.Canceled++
	case !measured:
		r.rep.Warmup++
	default:
		r.rep.Latency.Record(int64(now.Sub(since)))
		if jobs != nil {
			for _, j := range jobs {
				r.rep.Counts.add(j)
			}
		} else {
			r.rep.Counts.add(o)
		}
		if now.After(r.lastAnswer) {
			r.lastAnswer = now
		}
	}
}

// closedLoop runs cfg.Callers callers until the run ends.
func (r *runner) closedLoop() {
	var wg sync.WaitGroup
	for range r.cfg.Callers {
		wg.Go(func() {
			for {
				now := time.Now()
				if r.ctx.Err() != nil || (!r.end.IsZero() && !now.Before(r.end)) {
					return
				}
				measured := !now.Before(r.measureFrom)
				if measured && !r.takeMeasured() {
					return
				}
				r.submit(r.request(), now, measured)
			}
		})
	}
	wg.Wait()
}

// takeMeasured counts a measured send, unless Count of them were sent.
func (r *runner) takeMeasured() bool {
	if r.cfg.Count == 0 {
		r.measuredSent.Add(1)
		return true
	}
	for {
		n := r.measuredSent.Load()
		if n >= r.cfg.Count {
			return false
		}
		if r.measuredSent.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// due is when job i of an open loop is due: ⌊i·Per/Count⌋ after the start,
// computed without overflow.
func (r *runner) due(i int64) time.Time {
	rate := r.cfg.Rate
	q, rem := i/rate.Count, i%rate.Count
	return r.start.Add(time.Duration(q)*rate.Per + time.Duration(rem)*rate.Per/time.Duration(rate.Count))
}

// openLoop sends job i at due(i) until the run ends.
func (r *runner) openLoop() {
	slots := make(chan struct{}, r.cfg.MaxOutstanding)
	var endC <-chan time.Time
	if !r.end.IsZero() {
		t := time.NewTimer(time.Until(r.end))
		defer t.Stop()
		endC = t.C
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := int64(0); ; i++ {
		at := r.due(i)
		if !r.end.IsZero() && !at.Before(r.end) {
			return
		}
		measured := !at.Before(r.measureFrom)
		if measured && r.cfg.Count > 0 && r.measuredSent.Load() >= r.cfg.Count {
			return
		}
		if d := time.Until(at) - r.cfg.SpinWait; d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-r.ctx.Done():
				return
			}
		}
		if r.cfg.SpinWait > 0 {
			for time.Now().Before(at) && r.ctx.Err() == nil {
				runtime.Gosched()
			}
		}
		select {
		case slots <- struct{}{}:
		default:
			// Held back by the bound: wait for a slot, and charge the
			// wait to this job's latency.
			select {
			case slots <- struct{}{}:
				if measured {
					r.mu.Lock()
					r.rep.Late++
					r.mu.Unlock()
				}
			case <-r.ctx.Done():
				return
			case <-endC:
				r.mu.Lock()
				r.rep.Unsent += r.dueBeforeEnd(i)
				r.mu.Unlock()
				return
			}
		}
		if lag := time.Since(at); lag > 0 {
			r.mu.Lock()
			r.rep.MaxSendLag = max(r.rep.MaxSendLag, lag)
			r.mu.Unlock()
		}
		if measured {
			r.measuredSent.Add(1)
		}
		req := r.request()
		wg.Go(func() {
			defer func() { <-slots }()
			r.submit(req, at, measured)
		})
	}
}

// dueBeforeEnd counts the measured jobs from i on that are due before the
// end, within the count.
func (r *runner) dueBeforeEnd(i int64) int64 {
	var n int64
	sent := r.measuredSent.Load()
	for ; r.due(i).Before(r.end); i++ {
		if r.cfg.Count > 0 && sent+n >= r.cfg.Count {
			break
		}
		if !r.due(i).Before(r.measureFrom) {
			n++
		}
	}
	return n
}

// progress calls cfg.Progress every cfg.ProgressEvery until the returned
// stop is called.
func (r *runner) progress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(r.cfg.ProgressEvery)
		defer t.Stop()
		last, lastAnswered := r.start, int64(0)
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				answered := r.answered.Load()
				p := Progress{
					Elapsed:     now.Sub(r.start),
					Warmup:      now.Before(r.measureFrom),
					Sent:        r.seq.Load(),
					Answered:    answered,
					Outstanding: r.outstanding.Load(),
				}
				if dt := now.Sub(last).Seconds(); dt > 0 {
					p.Rate = float64(answered-lastAnswered) / dt
				}
				last, lastAnswered = now, answered
				r.mu.Lock()
				p.P99 = time.Duration(r.rep.Latency.Quantile(0.99))
				p.Counts = r.rep.Counts.clone()
				p.Late = r.rep.Late
				r.mu.Unlock()
				r.cfg.Progress(p)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
