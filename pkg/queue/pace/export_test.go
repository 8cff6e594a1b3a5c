package pace

import "time"

// SetKVPacerClock replaces a KVPacer's clock (tests only).
func SetKVPacerClock(p *KVPacer, now func() time.Time) { p.now = now }

// SetYieldingPacerClock replaces a YieldingPacer's clock (tests only).
func SetYieldingPacerClock(p *YieldingPacer, now func() time.Time) { p.now = now }

// KeyPausesHeld is how many keys k holds a pause of, ended or not.
func KeyPausesHeld(k *KeyPauses) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.until)
}

// SetKeyPausesClock sets k's clock.
func SetKeyPausesClock(k *KeyPauses, now func() time.Time) { k.now = now }
