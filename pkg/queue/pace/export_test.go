package pace

import "time"

// SetKVPacerClock replaces a KVPacer's clock (tests only).
func SetKVPacerClock(p *KVPacer, now func() time.Time) { p.now = now }

// SetYieldingPacerClock replaces a YieldingPacer's clock (tests only).
func SetYieldingPacerClock(p *YieldingPacer, now func() time.Time) { p.now = now }
