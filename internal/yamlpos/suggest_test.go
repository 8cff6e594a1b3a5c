package yamlpos

import "testing"

func TestSuggest(t *testing.T) {
	t.Parallel()
	fields := []string{"capacity", "per_key_capacity", "leak_rate", "max_age", "duplicate_window"}
	for _, tt := range []struct{ in, want string }{
		{"leak-rate", "leak_rate"},
		{"leakrate", "leak_rate"},
		{"Capacity", "capacity"},
		{"capcity", "capacity"},
		{"per_key_cap", "per_key_capacity"},
		{"per", "per_key_capacity"},
		{"ma", ""},
		{"size", ""},
		{"max_ag", "max_age"},
		{"", ""},
	} {
		if got := Suggest(tt.in, fields); got != tt.want {
			t.Errorf("Suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
