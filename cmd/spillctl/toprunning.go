package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The running part of spillctl top's keys section: the keys with jobs
// running now under a queue's per-key concurrency entries, from the
// concurrency part of GET /v1/queues/{queue}/keys
// (docs/design.md#per-key-concurrency).

// formatKeysRunning is formatKeys with each queue's running keys under
// its backlog keys.
func formatKeysRunning(ks []topKeys, loc *time.Location) string {
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(formatKeys([]topKeys{k}, loc))
		b.WriteString(formatRunning(k))
	}
	return b.String()
}

// formatRunning prints one queue's keys running jobs under its
// concurrency entries, one line per entry and key, most running first as
// the admitter lists them: nothing when none run or the listing could
// not be read (formatKeys says why).
func formatRunning(k topKeys) string {
	if k.Error != "" || len(k.Concurrency) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s — %d key%s running jobs under the concurrency bounds, across all workers\n",
		k.Queue, len(k.Concurrency), plural(len(k.Concurrency)))
	rows := [][]string{{"ENTRY", "KEY HASH", "RUNNING"}}
	for _, c := range k.Concurrency {
		rows = append(rows, []string{c.Name, c.KeyHash, strconv.Itoa(c.Running)})
	}
	for l := range strings.Lines(layout(rows, "llr")) {
		b.WriteString("  " + strings.TrimRight(l, " \n") + "\n")
	}
	return b.String()
}
