package admit

import (
	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
)

// concurrencyOf is the job's per-key concurrency stamp
// (docs/design.md#per-key-concurrency): for each of queue q's concurrency
// entries, the entry's name, the max of the job's key under the
// configuration this submission read, and the key's token. The key is
// read from the request as a limit tier reads its own; an entry the
// request gives no key for (no header, or no client address) does not
// bound the job, since a job is never refused for concurrency alone.
func concurrencyOf(q *config.Queue, r *Request) []queue.ConcurrencyKey {
	if len(q.Concurrency) == 0 {
		return nil
	}
	out := make([]queue.ConcurrencyKey, 0, len(q.Concurrency))
	for _, c := range q.Concurrency {
		var k string
		switch c.Key.Kind {
		case config.KeyGlobal:
		case config.KeyIP:
			if r.NoPeer || r.Peer == "" {
				continue
			}
			k = r.Peer
		case config.KeyHeader:
			if r.Keys != nil {
				k = r.Keys(c.Key.Header)
			}
			if k == "" {
				continue
			}
		}
		out = append(out, queue.ConcurrencyKey{Name: c.Name, Max: c.MaxOf(k), Token: queue.KeyToken(k)})
	}
	return out
}
