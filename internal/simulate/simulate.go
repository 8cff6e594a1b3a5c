// Package simulate replays arrivals through one limit with a simulated
// clock: the engine behind `spillctl simulate` (docs/design.md#simulate).
//
// Input, one arrival per line: "<seconds> [key]" — decimal seconds since the
// Unix epoch (so fixed windows align as they do in production), never
// decreasing, at most nanosecond precision; key defaults to "default". Blank
// lines and "#" comments are ignored. Output, one line per arrival:
//
//	<n> <seconds> admitted
//	<n> <seconds> queued <start_seconds>
//	<n> <seconds> rejected
//
// The simulation has no backlog: a verdict of Excess is printed as rejected.
package simulate

import (
	"bufio"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// Simulator replays arrivals. Store must read the clock that SetClock sets.
type Simulator struct {
	Limit    bucket.Limit
	Store    bucket.Store
	SetClock func(time.Time)
	// Summary appends "# "-prefixed lines with counts, the deepest queue
	// and wait percentiles.
	Summary bool
}

// InputError is a bad input line.
type InputError struct {
	Line   int
	Reason string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("simulate: input line %d: %s", e.Line, e.Reason)
}

// maxSeconds keeps arrival times within int64 nanoseconds.
const maxSeconds = 9_000_000_000

// ParseSeconds turns decimal seconds ("12", "1.5", "0.000000001") into
// nanoseconds exactly.
func ParseSeconds(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.HasPrefix(whole, "+") || strings.HasPrefix(whole, "-") {
		return 0, fmt.Errorf("time %q: want non-negative decimal seconds such as 1.5", s)
	}
	var sec int64
	if whole != "" {
		v, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || v > maxSeconds {
			return 0, fmt.Errorf("time %q: want non-negative decimal seconds below %d, such as 1.5", s, int64(maxSeconds))
		}
		sec = v
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("time %q: at most 9 decimals (nanoseconds)", s)
	}
	var ns int64
	if frac != "" {
		v, err := strconv.ParseUint(frac, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("time %q: want non-negative decimal seconds such as 1.5", s)
		}
		ns = int64(v)
		for range 9 - len(frac) {
			ns *= 10
		}
	}
	return sec*1e9 + ns, nil
}

// Arrival is one parsed input line.
type Arrival struct {
	Line    int
	Seconds string // as written, echoed in the output
	At      int64  // Unix ns
	Key     string
}

// Parser reads arrivals one line at a time.
type Parser struct {
	sc   *bufio.Scanner
	line int
	last int64
}

// NewParser reads arrivals from r. Lines are limited to 64 KiB.
func NewParser(r io.Reader) *Parser {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64*1024)
	return &Parser{sc: sc, last: -1}
}

// Next returns the next arrival, io.EOF at the end, or an *InputError.
func (p *Parser) Next() (Arrival, error) {
	for p.sc.Scan() {
		p.line++
		text := p.sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) > 2 {
			return Arrival{}, &InputError{p.line, fmt.Sprintf("%d fields, want \"<seconds> [key]\"", len(fields))}
		}
		at, err := ParseSeconds(fields[0])
		if err != nil {
			return Arrival{}, &InputError{p.line, err.Error()}
		}
		if at < p.last {
			return Arrival{}, &InputError{p.line, fmt.Sprintf("time %s is before the previous line's: arrivals must not go back in time", fields[0])}
		}
		p.last = at
		a := Arrival{Line: p.line, Seconds: fields[0], At: at, Key: "default"}
		if len(fields) == 2 {
			a.Key = fields[1]
		}
		return a, nil
	}
	if err := p.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Arrival{}, &InputError{p.line + 1, "longer than 64 KiB"}
		}
		return Arrival{}, fmt.Errorf("simulate: reading input: %w", err)
	}
	return Arrival{}, io.EOF
}

// FormatSeconds prints Unix ns as seconds with three decimals, rounded up
// so that a start time is never printed earlier than it is.
func FormatSeconds(ns int64) string {
	ms := (ns + 999_999) / 1_000_000
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

// Run replays every arrival from in and writes one line per arrival to out.
func (s *Simulator) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	w := bufio.NewWriter(out)
	p := NewParser(in)
	var (
		n           int
		counts      [3]int // admitted, queued, rejected
		waits       []int64
		pending     startHeap
		deepest     int64
		deepestSeen string
	)
	tier := make([]bucket.Tier, 1)
	for {
		a, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			w.Flush()
			return err
		}
		if err := ctx.Err(); err != nil {
			w.Flush()
			return err
		}
		n++
		s.SetClock(time.Unix(0, a.At))
		tier[0] = bucket.Tier{Key: a.Key, Limit: s.Limit}
		d, err := s.Store.Decide(ctx, "simulate", tier, 1)
		if err != nil {
			w.Flush()
			return fmt.Errorf("simulate: line %d: %w", a.Line, err)
		}
		for len(pending) > 0 && pending[0] <= a.At {
			heap.Pop(&pending)
		}
		switch d.Verdict {
		case bucket.Admitted:
			counts[0]++
			fmt.Fprintf(w, "%d %s admitted\n", n, a.Seconds)
		case bucket.Queued:
			counts[1]++
			start := d.NotBefore.UnixNano()
			waits = append(waits, start-a.At)
			heap.Push(&pending, start)
			if depth := int64(len(pending)); depth > deepest {
				deepest, deepestSeen = depth, a.Seconds
			}
			fmt.Fprintf(w, "%d %s queued %s\n", n, a.Seconds, FormatSeconds(start))
		default:
			counts[2]++
			fmt.Fprintf(w, "%d %s rejected\n", n, a.Seconds)
		}
	}
	if s.Summary {
		fmt.Fprintf(w, "# %d arrivals: %d admitted, %d queued, %d rejected\n", n, counts[0], counts[1], counts[2])
		if deepest > 0 {
			fmt.Fprintf(w, "# deepest queue: %d jobs waiting (at %s)\n", deepest, deepestSeen)
		} else {
			fmt.Fprintln(w, "# deepest queue: 0 jobs waiting")
		}
		if len(waits) > 0 {
			slices.Sort(waits)
			fmt.Fprintf(w, "# wait of queued jobs: p50 %s p90 %s p99 %s max %s\n",
				seconds(percentile(waits, 50)), seconds(percentile(waits, 90)), seconds(percentile(waits, 99)), seconds(waits[len(waits)-1]))
		}
	}
	return w.Flush()
}

func seconds(ns int64) string { return FormatSeconds(ns) + "s" }

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p int) int64 {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(0, rank-1)]
}

// startHeap holds the start times of queued jobs still waiting.
type startHeap []int64

func (h startHeap) Len() int           { return len(h) }
func (h startHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h startHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *startHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *startHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
