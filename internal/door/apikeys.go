package door

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// APIKeys is a set of API keys, kept as SHA-256 digests and compared in
// constant time, so neither the keys nor their timing leak. A nil or empty
// set allows everything.
//
// The set can be replaced while requests use it (Set): a door holds one
// *APIKeys for its life, and a reload of the key file swaps what it holds.
// All methods are safe for concurrent use; the zero value is an empty set.
// An APIKeys must not be copied after first use.
type APIKeys struct {
	set atomic.Pointer[keySet]
}

// keySet is one file's keys; never modified once stored.
type keySet struct {
	sums [][sha256.Size]byte
}

// LoadAPIKeys reads one key per line; blank lines and lines starting with
// '#' are skipped.
func LoadAPIKeys(path string) (*APIKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("door: API keys: %w", err)
	}
	return ParseAPIKeys(path, b)
}

// ParseAPIKeys reads data, the contents of the key file name, as
// LoadAPIKeys does. Its errors name the file and line, never a key.
func ParseAPIKeys(name string, data []byte) (*APIKeys, error) {
	ks := &keySet{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < 16 {
			return nil, fmt.Errorf("door: %s:%d: an API key of %d characters: want at least 16", name, n+1, len(line))
		}
		ks.sums = append(ks.sums, sha256.Sum256([]byte(line)))
	}
	if len(ks.sums) == 0 {
		return nil, fmt.Errorf("door: %s holds no API key; remove http.api_keys_file to run without authentication", name)
	}
	k := &APIKeys{}
	k.set.Store(ks)
	return k, nil
}

// Set makes k hold from's keys (none for a nil from: k then allows
// everything). Requests checked after Set returns see the new keys; one
// being checked sees the old or the new set, never a mix. k must not be nil.
func (k *APIKeys) Set(from *APIKeys) {
	var ks *keySet
	if from != nil {
		ks = from.set.Load()
	}
	k.set.Store(ks)
}

// Len is the number of keys in the set (0 for nil).
func (k *APIKeys) Len() int { return len(k.sums()) }

// Fingerprints names the keys as KeyFingerprint does, sorted: what a log
// may show of them.
func (k *APIKeys) Fingerprints() []string {
	sums := k.sums()
	fps := make([]string, len(sums))
	for i, sum := range sums {
		fps[i] = fmt.Sprintf("sha256:%x", sum[:6])
	}
	slices.Sort(fps)
	return fps
}

// sums is the current set's digests (nil for a nil or empty set).
func (k *APIKeys) sums() [][sha256.Size]byte {
	if k == nil {
		return nil
	}
	if ks := k.set.Load(); ks != nil {
		return ks.sums
	}
	return nil
}

func (k *APIKeys) empty() bool { return len(k.sums()) == 0 }

// has reports whether key is in the set (never, for an empty set).
func (k *APIKeys) has(key string) bool {
	return inSet(k.sums(), key)
}

// inSet reports in constant time whether key's digest is one of sums.
func inSet(sums [][sha256.Size]byte, key string) bool {
	if len(sums) == 0 {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	ok := 0
	for i := range sums {
		ok |= subtle.ConstantTimeCompare(sum[:], sums[i][:])
	}
	return ok == 1
}
