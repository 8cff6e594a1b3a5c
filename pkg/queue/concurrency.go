package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// HeaderConcurrencyKey carries a job's per-key concurrency bounds, one
// value per bound of its queue that keys it: "<name>:<max>:<key token>"
// (docs/design.md#per-key-concurrency). The admitter stamps it from the
// job's key headers and the queue's configuration when it decides the
// job, so that workers bound the job without reading raw keys or the
// configuration.
const HeaderConcurrencyKey = "Spillway-Concurrency-Key"

// MaxConcurrency bounds a concurrency entry's max.
const MaxConcurrency = 10000

// ConcurrencyKey is one concurrency bound of a job: at most Max jobs of
// its key (Token, a KeyToken) run at once under the queue's entry Name.
type ConcurrencyKey struct {
	Name  string
	Max   int
	Token string
}

// String is the header value of k.
func (k ConcurrencyKey) String() string {
	return k.Name + ":" + strconv.Itoa(k.Max) + ":" + k.Token
}

// ParseConcurrencyKey reads a HeaderConcurrencyKey value; the error says
// which part is wrong.
func ParseConcurrencyKey(s string) (ConcurrencyKey, error) {
	name, rest, ok1 := strings.Cut(s, ":")
	maxs, token, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || !validConcurrencyName(name) {
		return ConcurrencyKey{}, fmt.Errorf("%w: header %s %.100q: want NAME:MAX:KEYTOKEN", ErrInvalidJob, HeaderConcurrencyKey, s)
	}
	n, err := strconv.Atoi(maxs)
	if err != nil || n < 1 || n > MaxConcurrency {
		return ConcurrencyKey{}, fmt.Errorf("%w: header %s %.100q: max %q: want an integer from 1 to %d", ErrInvalidJob, HeaderConcurrencyKey, s, maxs, MaxConcurrency)
	}
	if len(token) != KeyTokenLen || strings.Trim(token, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return ConcurrencyKey{}, fmt.Errorf("%w: header %s %.100q: key token %q: want %d characters of a-z2-7", ErrInvalidJob, HeaderConcurrencyKey, s, token, KeyTokenLen)
	}
	return ConcurrencyKey{Name: name, Max: n, Token: token}, nil
}

// validConcurrencyName is a name of letters, digits, '_' and '-' of at
// most 64 bytes: it is a token of a key-value key.
func validConcurrencyName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter, digit := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z', '0' <= c && c <= '9'
		if !letter && !digit && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidConcurrencyName reports whether s may name a concurrency entry:
// letters, digits, '_' and '-', 1 to 64 bytes.
func ValidConcurrencyName(s string) bool { return validConcurrencyName(s) }
