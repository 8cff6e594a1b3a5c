package door

import "github.com/nats-io/nats.go/jetstream"

// OnKeysRead makes f hear of each read of a queue's key listing, until the
// returned func restores the previous hook.
func OnKeysRead(f func(js jetstream.JetStream, q string)) (restore func()) {
	prev := keysRead.Swap(&f)
	return func() { keysRead.Store(prev) }
}

// NATSInflight is the most request bytes d has answered at once, and the
// bytes it answers now.
func NATSInflight(d *NATSDoor) (peak, now int64) {
	d.inflight.mu.Lock()
	defer d.inflight.mu.Unlock()
	return d.inflight.peak, d.inflight.used
}

// NATSDropped is how many submissions d's subscription dropped as a slow
// consumer: those beyond its buffer.
func NATSDropped(t interface{ Fatal(...any) }, d *NATSDoor) int {
	n, err := d.sub.Dropped()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Admits reports whether a door holding submit keys k lets in a request
// carrying key ("" for none), as callerOf decides it without admin keys.
func Admits(k *APIKeys, key string) bool {
	_, ok := callerOf(k, nil, key)
	return ok
}
