package config

import "fmt"

// devSource is the built-in dev config's name in its problems.
const devSource = "built-in dev config"

// devYAML is the built-in configuration of `admitter --dev` without
// --config (docs/design.md#commands). The demo queue limits each client, named by the
// X-Client-Id header, to 5 jobs/s with a burst of 20 of which 5 start at
// once; a job without the header is keyed by the empty value (on_missing:
// shared), so all such jobs share one bucket.
const devYAML = `queues:
  - name: demo
    limits:
      - {key: "header:X-Client-Id", algorithm: leaky_bucket, rate: 5/s, burst: 20, delay: 5, on_missing: shared}
    backlog: {capacity: 100, leak_rate: 5/s}
    handler: {log: true}
`

// Dev returns the built-in dev configuration: every default, and one queue
// "demo" — leaky_bucket 5/s, burst 20, delay 5, keyed on the X-Client-Id
// header (on_missing: shared, so a job without it is keyed by the empty
// value: one shared bucket),
// a backlog of 100 drained at 5/s, and a handler that logs each job. Each
// call returns a new Config.
func Dev() *Config {
	c, problems := parse(devSource, []byte(devYAML), nil, Overrides{})
	if len(problems) > 0 {
		panic(fmt.Sprintf("config: the built-in dev config is invalid: %v", &ValidationError{Problems: problems}))
	}
	c.Source = ""
	return c
}
