package config_test

import (
	"fmt"

	"github.com/spillway-dev/spillway/internal/config"
)

func ExampleLoad() {
	// main passes os.Getenv and the Overrides its flags set.
	getenv := func(name string) string {
		return map[string]string{"SPILLWAY_REDIS_FAILURE_MODE": "local"}[name]
	}
	concurrency := 4
	c, err := config.Load("testdata/spillway.yaml", getenv, config.Overrides{WorkerConcurrency: &concurrency})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("redis:", c.Redis.URL, c.Redis.FailureMode, c.Redis.Timeout)
	fmt.Println("worker concurrency:", c.Worker.Concurrency)
	for _, q := range c.Queues {
		fmt.Printf("queue %s: backlog %d, leak %s, handler %s\n", q.Name, q.Backlog.Capacity, q.Backlog.LeakRate, q.Handler.HTTP.URL)
		for _, l := range q.Limits {
			fmt.Printf("  %s: %s\n", l.Key, l.Limit)
		}
	}
	// Output:
	// redis: redis://127.0.0.1:6379/0 local 50ms
	// worker concurrency: 4
	// queue email: backlog 10000, leak 50/s, handler http://127.0.0.1:9000/send
	//   header:X-Api-Key: leaky_bucket rate=10/s burst=20 delay=5
	//   global: token_bucket rate=500/s burst=1000
}

// Every problem of a file is reported, each with its file, line and field.
func ExampleLoad_errors() {
	_, err := config.Load("testdata/invalid.yaml", nil, config.Overrides{})
	fmt.Println(err)
	// Output:
	// testdata/invalid.yaml:4: queues[0].limits[0].rate: expected a rate such as "10/s", got "ten"
	// testdata/invalid.yaml:5: queues[0].limits[1].algorithm: expected one of leaky_bucket, token_bucket, fixed_window, sliding_log or sliding_window, got "token" (did you mean token_bucket?)
	// testdata/invalid.yaml:6: queues[0].backlog.leakrate: unknown field (did you mean leak_rate?)
	// testdata/invalid.yaml:6: queues[0].backlog.leak_rate: missing: expected a rate such as "50/s" at which the backlog drains; a worker refuses a queue without one
}
