package overrides

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// ErrInvalidPattern is wrapped by the error for a key pattern that cannot
// be used.
var ErrInvalidPattern = errors.New("overrides: invalid key pattern")

// MaxPatternLen bounds a pattern in bytes: the admitter refuses client
// keys over 1024 bytes, so no longer pattern could match one exactly.
const MaxPatternLen = 1024

// Pattern is the client keys an override applies to: Key exactly, or,
// when Prefix is set, every key that starts with Key. The zero value is
// the empty key exactly (the key of a header tier's requests without the
// header, under on_missing: shared). It is the queue's KeyPattern, which
// fairness weights pick their keys with too, so both match keys alike.
type Pattern = queue.KeyPattern

// ParsePattern reads a pattern as written: "tenant-a" is that key
// exactly, "tenant-*" every key starting with "tenant-", "*" every key.
// It refuses an empty pattern, a '*' that is not the last character, and
// one over MaxPatternLen bytes.
func ParsePattern(s string) (Pattern, error) {
	switch {
	case s == "":
		return Pattern{}, fmt.Errorf("%w: empty: want a key such as tenant-a, or a prefix such as tenant-*", ErrInvalidPattern)
	case len(s) > MaxPatternLen:
		return Pattern{}, fmt.Errorf("%w: %d bytes: want at most %d", ErrInvalidPattern, len(s), MaxPatternLen)
	}
	p := Pattern{Key: s}
	if strings.HasSuffix(s, "*") {
		p = Pattern{Key: s[:len(s)-1], Prefix: true}
	}
	if i := strings.IndexByte(p.Key, '*'); i >= 0 {
		return Pattern{}, fmt.Errorf("%w %.80q: '*' at byte %d; a '*' may only end a prefix, such as tenant-*", ErrInvalidPattern, s, i)
	}
	return p, nil
}
