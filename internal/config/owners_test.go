package config

import (
	"strings"
	"testing"
)

// Limits, backlogs and retry policies are judged by bucket, queue and retry
// alone; the file's problems place those packages' words at the field and
// line, and say which field to change.
func TestOwnersJudgeLimitsBacklogsAndRetries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, src, want string }{
		{"a bucket rule", strings.Replace(minimal, "rate: 1/s}]", "algorithm: token_bucket, rate: 1/s, burst: 2, delay: 1}]", 1),
			`spillway.yaml:3: queues[0].limits[0].delay: token_bucket has no delay, got 1`},
		{"a stray field of a window algorithm", strings.Replace(minimal, "rate: 1/s}]", "algorithm: sliding_log, limit: 5, window: 1s, burst: 3}]", 1),
			`spillway.yaml:3: queues[0].limits[0].burst: sliding_log takes limit and window, not burst`},
		{"a queue rule", strings.Replace(minimal, "{leak_rate: 1/s}", "{leak_rate: 1/s, per_key_capacity: -2}", 1),
			`spillway.yaml:4: queues[0].backlog.per_key_capacity: expected an integer ≥ 0, got "-2"`},
		{"a relation to a default", strings.Replace(minimal, "{leak_rate: 1/s}", "{leak_rate: 1/s, per_key_capacity: 10001}", 1),
			`spillway.yaml:4: queues[0].backlog.per_key_capacity: expected at most capacity (10000, the default), got 10001`},
		{"only the bounding field given", minimal + "    retry: {max: 100ms}\n",
			`spillway.yaml:5: queues[0].retry.max: expected at least initial (1s, the default), got 100ms`},
		{"a retry rule", minimal + "    retry: {initial: 0s, jitter: lots}\n",
			"spillway.yaml:5: queues[0].retry.initial: expected a positive duration, got \"0s\"\n" +
				`spillway.yaml:5: queues[0].retry.jitter: expected a number from 0 to 1, got "lots"`},
		{"replicas", "nats: {replicas: many}\n" + minimal,
			`spillway.yaml:1: nats.replicas: expected an integer from 1 to 5, got "many"`},
	} {
		if got := strings.Join(problems(t, tt.src), "\n"); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
