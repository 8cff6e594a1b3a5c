package door

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// APIKeys is a set of API keys, kept as SHA-256 digests and compared in
// constant time, so neither the keys nor their timing leak. A nil or empty
// set allows everything.
type APIKeys struct {
	sums [][sha256.Size]byte
}

// LoadAPIKeys reads one key per line; blank lines and lines starting with
// '#' are skipped.
func LoadAPIKeys(path string) (*APIKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("door: API keys: %w", err)
	}
	k := &APIKeys{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < 16 {
			return nil, fmt.Errorf("door: %s:%d: an API key of %d characters: want at least 16", path, n+1, len(line))
		}
		k.sums = append(k.sums, sha256.Sum256([]byte(line)))
	}
	if len(k.sums) == 0 {
		return nil, fmt.Errorf("door: %s holds no API key; remove http.api_keys_file to run without authentication", path)
	}
	return k, nil
}

// Allow reports whether r carries a valid key (always, for an empty set).
func (k *APIKeys) Allow(r *http.Request) bool {
	if k.empty() {
		return true
	}
	key := requestKey(r)
	return key != "" && k.has(key)
}

func (k *APIKeys) empty() bool { return k == nil || len(k.sums) == 0 }

// has reports whether key is in the set (never, for an empty set).
func (k *APIKeys) has(key string) bool {
	if k.empty() {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	ok := 0
	for i := range k.sums {
		ok |= subtle.ConstantTimeCompare(sum[:], k.sums[i][:])
	}
	return ok == 1
}
