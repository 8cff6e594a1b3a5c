package workerd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-dev/spillway/internal/config"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
)

// keyPausesOf is the queue's key pauses when its pushback scope is key
// (nil otherwise): one per queue for the process's life, so that the
// queue's successive workers share it and its count of pauses goes on.
func (p *Pool) keyPausesOf(q *config.Queue) *pace.KeyPauses {
	if q.Backlog.Pushback != queue.PushbackKey {
		return nil
	}
	if p.keyPauses == nil {
		p.keyPauses = make(map[string]*pace.KeyPauses)
	}
	k := p.keyPauses[q.Name]
	if k == nil {
		k = pace.NewKeyPauses()
		p.keyPauses[q.Name] = k
		p.m.setKeyPauses(q.Name, k)
	}
	return k
}

// keyPauseCollector reports the key pauses this process began, by queue
// (never by key: a key is a client's, and keys are unbounded), read at
// scrape time.
type keyPauseCollector struct {
	m     *metrics
	pause *prometheus.Desc
}

func newKeyPauseCollector(m *metrics) keyPauseCollector {
	return keyPauseCollector{m: m, pause: prometheus.NewDesc("spillway_key_pushback_pauses_total",
		"Pauses of one key's backlog jobs this process began because a handler's downstream pushed back (429, 503, busy) with pushback: key, by queue.",
		[]string{"queue"}, nil)}
}

func (c keyPauseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.pause }

func (c keyPauseCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for q, k := range c.m.keys {
		ch <- prometheus.MustNewConstMetric(c.pause, prometheus.CounterValue, float64(k.Pauses()), q)
	}
}

// setKeyPauses makes queue q's key pauses counted.
func (m *metrics) setKeyPauses(q string, k *pace.KeyPauses) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.keys[q] = k
	m.mu.Unlock()
}
