package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const weightsUsage = `Usage: spillctl weights list QUEUE
       spillctl weights get QUEUE KEY
       spillctl weights set QUEUE KEY WEIGHT
       spillctl weights rm QUEUE KEY
       [--server URL] [--admin-key KEY] [--json]

Fairness weights of a queue's drain (docs/design.md#fair-drain), through
the admitter's /v1/queues/{queue}/weights endpoints. KEY is a client key,
or for set and rm a pattern written as in backlog.fairness.weights: a key,
a prefix such as tenant-*, or * for every key. A key's weight is the most
specific rule's over the file's rules and set's: a key exactly, else the
longest prefix, else *, else 1; set's rule replaces the file's rule of the
same pattern.

  list  every rule: the configuration file's (config) and set's (runtime),
        and which are in force
  get   the weight KEY gets and the rule it comes from: default, config,
        or runtime (with who set it and when)
  set   give KEY (or a pattern's keys) WEIGHT, 1 to 1000: the drain weighs
        the jobs already waiting by it within a second, on every worker,
        kept across restarts and reloads
  rm    remove a runtime rule: KEY goes back to the file's rules

They take an admin key, one of the admitter's http.admin_keys_file.

Examples:
  spillctl weights set email tenant-a 3
  spillctl weights set email 'tenant-*' 2
  spillctl weights get email tenant-a
  spillctl weights list email --json
  spillctl weights rm email tenant-a

Flags:
`

// weightsArgs are how many positional arguments each subcommand takes.
var weightsArgs = map[string]int{"list": 1, "get": 2, "set": 3, "rm": 2}

func runWeights(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	const name = "spillctl weights"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	server := serverFlag(fs, getenv)
	adminKey := adminKeyFlag(fs, getenv)
	timeout := fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`")
	asJSON := fs.Bool("json", false, "print the admitter's answer as JSON")
	pos, done, err := parseArgs(fs, args, weightsUsage, stdout)
	if done || err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErrorf("%s: want list, get, set or rm (see %s --help)", name, name)
	}
	sub, want := pos[0], weightsArgs[pos[0]]
	if want == 0 {
		return usageErrorf("%s: unknown subcommand %q: want list, get, set or rm (see %s --help)", name, sub, name)
	}
	if len(pos)-1 != want {
		what := map[string]string{"list": "QUEUE", "get": "QUEUE KEY", "set": "QUEUE KEY WEIGHT", "rm": "QUEUE KEY"}[sub]
		return usageErrorf("%s %s: want %s, got %d arguments (see %s --help)", name, sub, what, len(pos)-1, name)
	}
	weight := 0
	if sub == "set" {
		if weight, err = strconv.Atoi(pos[3]); err != nil || weight < 1 || weight > 1000 {
			return usageErrorf("%s set: WEIGHT %q: want an integer from 1 to 1000", name, pos[3])
		}
	}
	a, err := newAdmitter(name, *server, adminKey(), *timeout)
	if err != nil {
		return err
	}
	var (
		l *spillway.WeightList
		k *spillway.KeyWeight
	)
	switch sub {
	case "list":
		l, err = a.c.Weights(ctx, pos[1])
	case "get":
		k, err = a.c.KeyWeight(ctx, pos[1], pos[2])
	case "set":
		k, err = a.c.SetWeight(ctx, pos[1], pos[2], weight)
	case "rm":
		err = a.c.DeleteWeight(ctx, pos[1], pos[2])
	}
	if err != nil {
		var pe *client.ProblemError
		if errors.As(err, &pe) && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden) {
			return fmt.Errorf("%s %s: %w; the weights endpoints take an admin key: set --admin-key or $SPILLWAY_ADMIN_KEY", name, sub, a.explain(err))
		}
		return fmt.Errorf("%s %s: %w", name, sub, a.explain(err))
	}
	switch {
	case sub == "rm" && *asJSON:
		return nil
	case sub == "rm":
		_, err := fmt.Fprintf(stdout, "%s: runtime weight of %s removed\n", pos[1], pos[2])
		return err
	case sub == "list" && *asJSON:
		return writeJSON(stdout, l)
	case sub == "list":
		_, err := io.WriteString(stdout, weightTable(*l))
		return err
	case *asJSON:
		return writeJSON(stdout, k)
	}
	line := fmt.Sprintf("%s %s: weight %d (%s", k.Queue, k.Key, k.Weight, k.Source)
	if k.Pattern != "" && k.Pattern != k.Key {
		line += " " + k.Pattern
	}
	line += origin(k.By, k.At, 0) + ")"
	_, err = fmt.Fprintln(stdout, line)
	return err
}

// weightTable is a WeightList for people: one row per rule.
func weightTable(l spillway.WeightList) string {
	rows := [][]string{{"KEY", "WEIGHT", "SOURCE", "IN FORCE"}}
	for _, r := range l.Rules {
		inForce := "yes"
		if !r.InForce {
			inForce = "no: replaced by runtime"
		}
		rows = append(rows, []string{r.Key, strconv.Itoa(r.Weight), r.Source + origin(r.By, r.At, 0), inForce})
	}
	return table(rows)
}
