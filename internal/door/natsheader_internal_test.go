package door

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// natsHeaders must find what headerGet finds, whatever the case of the
// names sent and asked for.
func TestNATSHeadersAsHeaderGet(t *testing.T) {
	headers := []nats.Header{
		nil,
		{},
		{"X-Api-Key": {"k"}, "Spillway-Cost": {"3"}},
		{"x-api-key": {"k"}, "Spillway-Cost": {"3"}},
		{"X-API-KEY": {"k"}},
		{"X-Api-Key": {}, "x-api-key": {"lower"}},
		{"X-Api-\u212aey": {"kelvin"}}, // folds to X-Api-Key
		{"Spillway-Not-Before": {"2026-01-01T00:00:00Z"}, "X-1a": {"digit"}},
		{"Bad Name": {"v"}, "X-Api-Key": {"k"}},
	}
	names := []string{"X-Api-Key", "x-api-key", "X-API-KEY", "Spillway-Cost", "Spillway-Not-Before", "X-1a", "X-1A", "Authorization", "Bad Name", ""}
	for _, h := range headers {
		for _, k := range names {
			if got, want := natsHeaderOf(h).get(k), headerGet(h, k); got != want {
				t.Errorf("headers %v, name %q: %q, headerGet %q", h, k, got, want)
			}
		}
	}
	for k, want := range map[string]bool{"X-Api-Key": true, "Spillway-Cost": true, "X-1a": true, "X-1A": false, "x-Api-Key": false,
		"X-API-Key": false, "": false, "X_Api": false, "-X": true} {
		if got := canonicalName(k); got != want {
			t.Errorf("canonicalName(%q) = %v, want %v", k, got, want)
		}
	}
}
