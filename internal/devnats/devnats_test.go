package devnats

import (
	"strings"
	"testing"
)

// TestExposureWarning decides from nats.listen and whether the server
// requires credentials: loopback stays quiet, anything another machine
// may reach without credentials is warned about.
func TestExposureWarning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		auth   bool
		warn   bool
	}{
		{"127.0.0.1:4222", false, false},
		{"127.0.0.2:0", false, false},
		{"localhost:4222", false, false},
		{"[::1]:4222", false, false},
		{":4222", false, true},
		{"0.0.0.0:4222", false, true},
		{"[::]:4222", false, true},
		{"192.168.1.5:4222", false, true},
		{"nats.internal:4222", false, true},
		{"0.0.0.0:4222", true, false},
	} {
		got := ExposureWarning(tt.listen, tt.auth)
		if (got != "") != tt.warn {
			t.Errorf("ExposureWarning(%q, auth %v) = %q, want a warning: %v", tt.listen, tt.auth, got, tt.warn)
		}
		if got != "" && (!strings.Contains(got, tt.listen) || !strings.Contains(got, "READY") || !strings.Contains(got, "nats.listen")) {
			t.Errorf("ExposureWarning(%q): %q should name the address, what anyone can do and the fix", tt.listen, got)
		}
	}
}
