package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/spillway-dev/spillway/pkg/queue/admin"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The keys section of spillctl top: the keys with the deepest backlogs of
// each queue, from GET /v1/queues/{queue}/keys (docs/design.md#reads).

// defaultTopKeys is how many keys top shows per queue unless --keys says.
const defaultTopKeys = 5

// keysParallel bounds how many queues' listings top reads at once.
const keysParallel = 4

// topKeysFlags are top's flags for the keys section.
type topKeysFlags struct {
	queue *string
	n     *int
}

func addTopKeysFlags(fs *flag.FlagSet) topKeysFlags {
	return topKeysFlags{
		queue: fs.String("queue", "", "show only `QUEUE`: its row and its keys"),
		n:     fs.Int("keys", defaultTopKeys, "show the `N` keys with the deepest backlog of each queue (0: none)"),
	}
}

// check reports a bad value, naming the flag.
func (f topKeysFlags) check(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "queue" && strings.TrimSpace(*f.queue) == "" {
			err = usageErrorf("spillctl top: --queue: want a queue name (spillctl queues lists them)")
		}
	})
	if err != nil {
		return err
	}
	if *f.n < 0 || *f.n > admin.MaxTopKeys {
		return usageErrorf("spillctl top: --keys %d: want 0 (no keys) to %d", *f.n, admin.MaxTopKeys)
	}
	return nil
}

// topKeys is one queue's keys in a frame: the admitter's listing, or the
// error that kept it.
type topKeys struct {
	spillway.KeyList
	Error string `json:"error,omitempty"`
}

// sample completes a sample of the queue table: it keeps only the queue
// --queue selects, and reads the keys of each queue whose backlog has jobs
// (of the selected queue, always).
func (f topKeysFlags) sample(ctx context.Context, a *admitter, s topSample) topSample {
	if s.err != nil {
		return s
	}
	if *f.queue != "" {
		var sel []spillway.QueueInfo
		for _, q := range s.queues {
			if q.Name == *f.queue {
				sel = append(sel, q)
			}
		}
		if len(sel) == 0 {
			s.err = fmt.Errorf("the admitter at %s has no queue %q (spillctl queues lists them)", a.base, *f.queue)
			return s
		}
		s.queues = sel
	}
	if *f.n == 0 {
		return s
	}
	var names []string
	for _, q := range s.queues {
		if q.Depth > 0 || q.Name == *f.queue {
			names = append(names, q.Name)
		}
	}
	s.keys = make([]topKeys, len(names))
	sem := make(chan struct{}, keysParallel)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s.keys[i] = readKeys(ctx, a, name, *f.n)
		})
	}
	wg.Wait()
	sort.Slice(s.keys, func(i, j int) bool { return s.keys[i].Queue < s.keys[j].Queue })
	return s
}

// readKeys reads the n keys with the deepest backlog of queue q.
func readKeys(ctx context.Context, a *admitter, q string, n int) topKeys {
	k := topKeys{KeyList: spillway.KeyList{Queue: q}}
	if kl, err := a.c.Keys(ctx, q, n); err != nil {
		k.Error = a.explain(err).Error()
	} else {
		k.KeyList = *kl
	}
	k.Queue = q
	return k
}

// formatKeys prints each queue's keys under the queue table: a heading,
// then one line per key, deepest first. A key is its hash unless the
// admitter shows raw keys (http.show_raw_keys); RELEASED, its share of
// the jobs the drain released lately, is blank when no drain published
// counts.
func formatKeys(ks []topKeys, loc *time.Location) string {
	var b strings.Builder
	for _, k := range ks {
		b.WriteString("\n" + k.Queue + " — ")
		switch {
		case k.Error != "":
			b.WriteString("keys unavailable: " + k.Error + "\n")
			continue
		case len(k.Keys) == 0:
			b.WriteString("no jobs in the backlog\n")
			continue
		}
		fmt.Fprintf(&b, "top %d of %d key%s by backlog depth", len(k.Keys), k.TotalKeys, plural(k.TotalKeys))
		if k.ReleasesAt != nil {
			fmt.Fprintf(&b, "; released: share of the jobs released in the %ds to %s", k.ReleasesWindowS, k.ReleasesAt.In(loc).Format("15:04:05"))
		}
		b.WriteString("\n")
		head := "KEY HASH"
		for _, ki := range k.Keys {
			if ki.Key != nil {
				head = "KEY"
			}
		}
		rows := [][]string{{head, "DEPTH", "OLDEST", "WEIGHT", "HIGH/NORMAL/LOW", "RELEASED"}}
		for _, ki := range k.Keys {
			name := ki.KeyHash
			if ki.Key != nil {
				name = showKey(*ki.Key)
			}
			share := ""
			if ki.ReleaseShare != nil {
				share = fmtFill(*ki.ReleaseShare)
			}
			rows = append(rows, []string{
				name, strconv.FormatUint(ki.Depth, 10), fmtDur(time.Duration(ki.OldestAgeMS) * time.Millisecond), strconv.Itoa(ki.Weight),
				fmt.Sprintf("%d/%d/%d", ki.Priority.High, ki.Priority.Normal, ki.Priority.Low), share,
			})
		}
		for l := range strings.Lines(table(rows)) {
			b.WriteString("  " + strings.TrimRight(l, " \n") + "\n")
		}
	}
	return b.String()
}

// showKey fits a raw key to a column: quoted when it holds spaces or
// characters a terminal would act on, cut to 40 characters.
func showKey(k string) string {
	if k == "" || strings.ContainsFunc(k, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }) {
		k = strconv.Quote(k)
	}
	return clip(k, 40)
}
