package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

const concurrencyUsage = `Usage: spillctl concurrency list QUEUE
       spillctl concurrency get QUEUE NAME KEY
       spillctl concurrency set QUEUE NAME KEY --max N
       spillctl concurrency rm QUEUE NAME KEY
       [--server URL] [--admin-key KEY] [--json]

Per-key concurrency overrides (docs/design.md#per-key-concurrency),
through the admitter's /v1/queues/{queue}/concurrency endpoints. NAME is
a concurrency entry's name; KEY a client key, or for set and rm a prefix
such as tenant-* (the most specific override wins: a key exactly over a
prefix, a longer prefix over a shorter one; for the same pattern, set's
over the configuration file's).

  list  every entry's own max and its overrides, from the configuration
        file (config) and from set (runtime)
  get   the max KEY gets and where it comes from: default, config, or
        runtime (with who set it and when)
  set   give KEY (or a prefix's keys) another max, from 1 to 10000: every
        admitter stamps it on the jobs it admits within a second, and it
        is kept across restarts. Jobs admitted before keep their max.
  rm    remove a runtime override: KEY goes back to the configuration's

They take an admin key, one of the admitter's http.admin_keys_file.

Examples:
  spillctl concurrency set email per-tenant tenant-a --max 10
  spillctl concurrency set email per-tenant 'tenant-*' --max 4
  spillctl concurrency get email per-tenant tenant-a
  spillctl concurrency list email --json
  spillctl concurrency rm email per-tenant tenant-a

Flags:
`

func runConcurrency(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	const name = "spillctl concurrency"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	server := serverFlag(fs, getenv)
	adminKey := adminKeyFlag(fs, getenv)
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`")
	asJSON := fs.Bool("json", false, "print the admitter's answer as JSON")
	maxJobs := fs.Int("max", 0, "set: how many jobs of one key run at once, `N` from 1 to 10000")
	pos, done, err := parseArgs(fs, args, concurrencyUsage, stdout)
	if done || err != nil {
		return err
	}
	sub, err := overrideSubcommand(name, pos, "NAME")
	if err != nil {
		return err
	}
	if sub == "set" && *maxJobs == 0 {
		return usageErrorf("%s set: give the max: --max N (see %s --help)", name, name)
	}
	a, err := newAdmitter(name, *server, adminKey(), *timeout)
	if err != nil {
		return err
	}
	var (
		l *spillway.ConcurrencyList
		k *spillway.KeyConcurrencyMax
	)
	switch sub {
	case "list":
		l, err = a.c.Concurrency(ctx, pos[1])
	case "get":
		k, err = a.c.KeyConcurrency(ctx, pos[1], pos[2], pos[3])
	case "set":
		k, err = a.c.SetKeyConcurrency(ctx, pos[1], pos[2], pos[3], *maxJobs)
	case "rm":
		err = a.c.DeleteKeyConcurrency(ctx, pos[1], pos[2], pos[3])
	}
	if err != nil {
		return a.adminError(name+" "+sub, "concurrency", err)
	}
	return printOverride(stdout, pos, *asJSON, l, func() string { return concurrencyTable(*l) }, k, func() string {
		return fmt.Sprintf("%s/%s %s: max %d (%s%s)", k.Queue, k.Concurrency, k.Key, k.Max, k.Source, matched(k.Key, k.Pattern)+origin(k.By, k.At, k.Line))
	})
}

// concurrencyTable is a ConcurrencyList for people: one row per entry,
// one per override under it.
func concurrencyTable(l spillway.ConcurrencyList) string {
	rows := [][]string{{"NAME", "KEY", "MAX", "SOURCE"}}
	for _, e := range l.Entries {
		rows = append(rows, []string{e.Name, e.KeyedBy, strconv.Itoa(e.Max), "default"})
		for _, o := range e.Overrides {
			rows = append(rows, []string{"", o.Key, strconv.Itoa(o.Max), o.Source + origin(o.By, o.At, o.Line)})
		}
	}
	return table(rows)
}
