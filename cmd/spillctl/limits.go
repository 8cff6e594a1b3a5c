package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const limitsUsage = `Usage: spillctl limits list QUEUE
       spillctl limits get QUEUE TIER KEY
       spillctl limits set QUEUE TIER KEY [--rate R] [--burst N] [--delay N] [--nodelay] [--limit N] [--window D]
       spillctl limits rm QUEUE TIER KEY
       [--server URL] [--admin-key KEY] [--json]

Per-key limit overrides (docs/design.md#per-key-overrides), through the
admitter's /v1/queues/{queue}/limits endpoints. TIER is a tier's name or
its index in the queue's limits; KEY a client key, or for set and rm a
prefix such as tenant-* (the most specific override wins: a key exactly
over a prefix, a longer prefix over a shorter one).

  list  every tier's own parameters and its overrides, from the
        configuration file (config) and from set (runtime)
  get   the limit KEY gets and where it comes from: default, config, or
        runtime (with who set it and when)
  set   give KEY (or a prefix's keys) other parameters of the tier's
        algorithm, on every admitter within a second, kept across
        restarts: --rate and --burst (and --delay or --nodelay) for
        leaky_bucket and token_bucket, --limit and --window for the others
  rm    remove a runtime override: KEY goes back to the configuration's

They take an admin key, one of the admitter's http.admin_keys_file.

Examples:
  spillctl limits set email per-key tenant-a --rate 100/s --burst 200
  spillctl limits set email 0 'tenant-*' --rate 50/s --burst 50
  spillctl limits get email per-key tenant-a
  spillctl limits list email --json
  spillctl limits rm email per-key tenant-a

Flags:
`

// overrideArgs are how many positional arguments each subcommand of
// limits and concurrency takes.
var overrideArgs = map[string]int{"list": 1, "get": 3, "set": 3, "rm": 3}

// overrideSubcommand checks the positional arguments of limits or
// concurrency (cmd): a subcommand of overrideArgs and its arguments,
// QUEUE and, but for list, which (TIER, NAME) and KEY.
func overrideSubcommand(cmd string, pos []string, which string) (string, error) {
	if len(pos) == 0 {
		return "", usageErrorf("%s: want list, get, set or rm (see %s --help)", cmd, cmd)
	}
	sub, want := pos[0], overrideArgs[pos[0]]
	if want == 0 {
		return "", usageErrorf("%s: unknown subcommand %q: want list, get, set or rm (see %s --help)", cmd, sub, cmd)
	}
	if len(pos)-1 != want {
		what := "QUEUE " + which + " KEY"
		if sub == "list" {
			what = "QUEUE"
		}
		return "", usageErrorf("%s %s: want %s, got %d arguments (see %s --help)", cmd, sub, what, len(pos)-1, cmd)
	}
	return sub, nil
}

// adminError is err of call, a command of an admin endpoint (those of
// endpoints: "limits"), explained; a 401 or 403 says to give an admin
// key.
func (a *admitter) adminError(call, endpoints string, err error) error {
	var pe *client.ProblemError
	if errors.As(err, &pe) && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden) {
		return fmt.Errorf("%s: %w; the %s endpoints take an admin key: set --admin-key or $SPILLWAY_ADMIN_KEY", call, a.explain(err), endpoints)
	}
	return fmt.Errorf("%s: %w", call, a.explain(err))
}

func runLimits(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	const name = "spillctl limits"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	server := serverFlag(fs, getenv)
	adminKey := adminKeyFlag(fs, getenv)
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`")
	asJSON := fs.Bool("json", false, "print the admitter's answer as JSON")
	var p spillway.LimitParams
	fs.StringVar(&p.Rate, "rate", "", "set: the `RATE` of a leaky_bucket or token_bucket tier, such as 100/s")
	fs.Int64Var(&p.Burst, "burst", 0, "set: the burst `N` of a leaky_bucket or token_bucket tier")
	fs.Int64Var(&p.Delay, "delay", 0, "set: the delay `N` of a leaky_bucket tier")
	fs.BoolVar(&p.NoDelay, "nodelay", false, "set: a leaky_bucket tier's delay is its burst")
	fs.Int64Var(&p.Limit, "limit", 0, "set: the `N` units per window of a window tier")
	fs.StringVar(&p.Window, "window", "", "set: the window `D` of a window tier, such as 1m")
	pos, done, err := parseArgs(fs, args, limitsUsage, stdout)
	if done || err != nil {
		return err
	}
	sub, err := overrideSubcommand(name, pos, "TIER")
	if err != nil {
		return err
	}
	if sub == "set" && p == (spillway.LimitParams{}) {
		return usageErrorf("%s set: give the parameters: --rate and --burst, or --limit and --window (see %s --help)", name, name)
	}
	a, err := newAdmitter(name, *server, adminKey(), *timeout)
	if err != nil {
		return err
	}
	var (
		l *spillway.LimitList
		k *spillway.KeyLimit
	)
	switch sub {
	case "list":
		l, err = a.c.Limits(ctx, pos[1])
	case "get":
		k, err = a.c.KeyLimit(ctx, pos[1], pos[2], pos[3])
	case "set":
		k, err = a.c.SetKeyLimit(ctx, pos[1], pos[2], pos[3], p)
	case "rm":
		err = a.c.DeleteKeyLimit(ctx, pos[1], pos[2], pos[3])
	}
	if err != nil {
		return a.adminError(name+" "+sub, "limits", err)
	}
	return printOverride(stdout, pos, *asJSON, l, func() string { return limitTable(*l) }, k, func() string {
		return fmt.Sprintf("%s/%s %s: %s %s (%s%s)", k.Queue, k.Tier, k.Key, k.Algorithm, paramsText(k.LimitParams), k.Source,
			matched(k.Key, k.Pattern)+origin(k.By, k.At, k.Line))
	})
}

// printOverride prints the answer of a limits or concurrency subcommand
// (pos[0]): nothing for rm --json, a line for rm, a list as JSON or as
// listTable, one key's answer as JSON or as keyLine.
func printOverride(stdout io.Writer, pos []string, asJSON bool, list any, listTable func() string, key any, keyLine func() string) error {
	var err error
	switch sub := pos[0]; {
	case sub == "rm" && asJSON:
	case sub == "rm":
		_, err = fmt.Fprintf(stdout, "%s/%s: override of %s removed\n", pos[1], pos[2], pos[3])
	case sub == "list" && asJSON:
		err = writeJSON(stdout, list)
	case sub == "list":
		_, err = io.WriteString(stdout, listTable())
	case asJSON:
		err = writeJSON(stdout, key)
	default:
		_, err = fmt.Fprintln(stdout, keyLine())
	}
	return err
}

// matched is " PATTERN" when the override that matched key is a prefix
// pattern, else "".
func matched(key, pattern string) string {
	if pattern != "" && pattern != key {
		return " " + pattern
	}
	return ""
}

// adminKeyFlag adds --admin-key to fs; the function it returns is the key
// to send: the flag's, else $SPILLWAY_ADMIN_KEY.
func adminKeyFlag(fs *flag.FlagSet, getenv func(string) string) func() string {
	key := fs.String("admin-key", "", "send Authorization: Bearer `KEY`, an admin key (default $SPILLWAY_ADMIN_KEY)")
	return func() string {
		if *key != "" {
			return *key
		}
		return getenv("SPILLWAY_ADMIN_KEY")
	}
}

// paramsText is p as the configuration file writes it.
func paramsText(p spillway.LimitParams) string {
	var parts []string
	if p.Rate != "" {
		parts = append(parts, "rate="+p.Rate)
	}
	if p.Rate != "" || p.Burst != 0 {
		parts = append(parts, "burst="+strconv.FormatInt(p.Burst, 10))
	}
	if p.Delay != 0 {
		parts = append(parts, "delay="+strconv.FormatInt(p.Delay, 10))
	}
	if p.NoDelay {
		parts = append(parts, "nodelay")
	}
	if p.Limit != 0 {
		parts = append(parts, "limit="+strconv.FormatInt(p.Limit, 10))
	}
	if p.Window != "" {
		parts = append(parts, "window="+p.Window)
	}
	return strings.Join(parts, " ")
}

// origin says who set a runtime override and when, or a config one's
// line.
func origin(by string, at *time.Time, line int) string {
	switch {
	case at != nil:
		return fmt.Sprintf(" by %s at %s", by, at.Local().Format(time.DateTime))
	case line > 0:
		return fmt.Sprintf(" at line %d", line)
	}
	return ""
}

// limitTable is a LimitList for people: one row per tier, one per
// override under it.
func limitTable(l spillway.LimitList) string {
	rows := [][]string{{"TIER", "KEY", "LIMIT", "SOURCE"}}
	for _, t := range l.Tiers {
		rows = append(rows, []string{fmt.Sprintf("%s (%d)", t.Tier, t.Index), t.KeyedBy, t.Algorithm + " " + paramsText(t.LimitParams), "default"})
		for _, o := range t.Overrides {
			rows = append(rows, []string{"", o.Key, paramsText(o.LimitParams), o.Source + origin(o.By, o.At, o.Line)})
		}
	}
	return table(rows)
}
