package admittest

// TwinConfig is two queues alike, "batch" and "singles": one takes a
// batch, the other the same jobs as single submissions, each from the
// same (empty) state, so that their answers can be compared job by job.
// Per client (header X-Client) a leaky bucket, and a global token bucket
// that runs dry, so that keys share a tier; READY and the backlog are
// small, per key too, so that jobs are moved from a full READY to the
// backlog, refused by a full backlog or by their key's full share, and
// given their units back.
var TwinConfig = "queues:\n" + twinQueue("batch") + twinQueue("singles")

func twinQueue(name string) string {
	return `  - name: ` + name + `
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 1/s, burst: 12, delay: 2}
      - {key: global, algorithm: token_bucket, rate: 1/s, burst: 250}
    backlog: {capacity: 100, per_key_capacity: 2, leak_rate: 1/s}
    ready: {capacity: 20}
`
}
