package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/internal/yamlpos"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The checks below read one value as text, the same way from the file, the
// environment and flags. Each error is a message "expected …, got …" that the
// caller places after "FILE:LINE: field: " or "environment: VARIABLE: ".

// What a value of each kind looks like, for "expected" messages.
const (
	wantDuration = `a Go duration such as "1s" or "5m"`
	wantRate     = `a rate such as "10/s"`
	wantPattern  = `a client key such as "tenant-a", or a prefix such as "tenant-*"`
	wantListen   = `host:port such as ":8080" or "127.0.0.1:8080"`
	wantKey      = `"global", "ip" or "header:NAME"`
	wantProxy    = `an IP address or a CIDR prefix such as "10.0.0.0/8"`
	wantQueue    = `a name of 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'`
	wantTierName = `a name of 1 to 64 characters from A-Z, a-z, 0-9, '_', '-' and '.'`
)

func expected(want, got string) error {
	return fmt.Errorf("expected %s, got %q", want, got)
}

func intRange(lo, hi int64) string {
	if hi >= maxInt {
		return fmt.Sprintf("an integer ≥ %d", lo)
	}
	return fmt.Sprintf("an integer from %d to %d", lo, hi)
}

// maxInt bounds integers that end up in an int (concurrency, replicas,
// attempts) on every platform.
const maxInt = 1<<31 - 1

// oneOf is the check of a setting that takes one of values.
func oneOf[T ~string](values ...T) func(string) error {
	return func(s string) error {
		names := make([]string, len(values))
		for i, v := range values {
			names[i] = string(v)
		}
		if slices.Contains(names, s) {
			return nil
		}
		return yamlpos.WithSuggestion(expected("one of "+strings.Join(names, ", "), s), s, names)
	}
}

// checkTierName accepts a tier name that is a token in a RateLimit-Policy
// header's quoted policy name and a plain Prometheus label value: no
// quotes, backslashes, spaces or other punctuation to escape.
func checkTierName(s string) error {
	if s == "" || len(s) > 64 {
		return expected(wantTierName, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			return expected(wantTierName, s)
		}
	}
	return nil
}

// checkListen accepts host:port with a port from 0 to 65535; no host is
// every interface.
func checkListen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return expected(wantListen, s)
	}
	return nil
}

// checkNATSURL accepts what conn.NATS connects to; a password or token in
// it is not printed.
func checkNATSURL(s string) error {
	if !conn.ValidNATSURL(s) {
		return expected(conn.WantNATSURL, conn.Redact(s))
	}
	return nil
}

// checkInboxPrefix accepts what nats.CustomInboxPrefix takes: a subject
// prefix without wildcards; "" is NATS's own.
func checkInboxPrefix(s string) error {
	if s != "" && !conn.ValidInboxPrefix(s) {
		return expected(conn.WantInboxPrefix, s)
	}
	return nil
}

// checkReplyPrefix accepts nats.reply_prefix: a subject prefix ending
// with ".", without wildcards or spaces.
func checkReplyPrefix(s string) error {
	const want = `a subject prefix ending with "." without wildcards, such as "_INBOX."`
	if s == "" || !strings.HasSuffix(s, ".") || strings.ContainsAny(s, "*> \t\r\n") || strings.Contains(s, "..") || strings.HasPrefix(s, ".") {
		return expected(want, s)
	}
	return nil
}

// CredentialHeader reports whether a request header named name carries
// a credential (in any case): Authorization, Proxy-Authorization,
// X-Api-Key, Cookie. A tier may key on one — its values are hashed —
// but they are never shown raw.
func CredentialHeader(name string) bool {
	switch strings.ToLower(name) {
	case "authorization", "proxy-authorization", "x-api-key", "cookie":
		return true
	}
	return false
}

func checkQueueName(s string) error {
	if spillway.ValidateQueueName(s) != nil {
		return expected(wantQueue, s)
	}
	return nil
}

func parseProxy(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, expected(wantProxy, s)
}

// parseKey reads a limit tier's key: "global", "ip" or "header:NAME", with
// NAME canonicalised.
func parseKey(s string) (Key, error) {
	switch s {
	case "global":
		return Key{Kind: KeyGlobal}, nil
	case "ip":
		return Key{Kind: KeyIP}, nil
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		name = strings.TrimSpace(name)
		if !spillway.IsToken(name) {
			return Key{}, fmt.Errorf("expected a header name after \"header:\" (letters, digits and !#$%%&'*+-.^_`|~), got %q", s)
		}
		return Key{Kind: KeyHeader, Header: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	candidates := []string{"global", "ip"}
	if kind, name, ok := strings.Cut(s, ":"); ok && yamlpos.Suggest(kind, []string{"header"}) != "" {
		candidates = append(candidates, "header:"+name) // "headers:X-Api-Key", "Header:X-Api-Key"
	}
	return Key{}, yamlpos.WithSuggestion(expected(wantKey, s), s, candidates)
}

func (k Key) String() string {
	switch k.Kind {
	case KeyHeader:
		return "header:" + k.Header
	case KeyIP:
		return "ip"
	}
	return "global"
}
