package door

import "github.com/nats-io/nats.go/jetstream"

// OnKeysRead makes f hear of each read of a queue's key listing, until the
// returned func restores the previous hook.
func OnKeysRead(f func(js jetstream.JetStream, q string)) (restore func()) {
	prev := keysRead.Swap(&f)
	return func() { keysRead.Store(prev) }
}
