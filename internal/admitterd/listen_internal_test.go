package admitterd

import "testing"

// loopbackOnly decides the warning an admitter without API keys logs at
// start: only an address that takes connections from this machine alone
// spares it.
func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		want   bool
	}{
		{":8080", false},        // every interface
		{"0.0.0.0:8080", false}, // every IPv4 interface
		{"[::]:8080", false},    // every interface
		{"192.168.1.10:8080", false},
		{"api.example.com:8080", false}, // a name may resolve anywhere
		{"8080", false},                 // does not parse: warn rather than guess
		{"127.0.0.1:8080", true},
		{"127.0.0.2:8080", true},
		{"localhost:8080", true},
		{"LOCALHOST:8080", true},
		{"[::1]:8080", true},
		{"[::ffff:127.0.0.1]:8080", true},
	} {
		if got := loopbackOnly(tt.listen); got != tt.want {
			t.Errorf("loopbackOnly(%q) = %v, want %v", tt.listen, got, tt.want)
		}
	}
}
