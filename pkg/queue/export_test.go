package queue

import "time"

// SetKVPacerClock replaces a KVPacer's clock (tests only).
func SetKVPacerClock(p *KVPacer, now func() time.Time) { p.now = now }
