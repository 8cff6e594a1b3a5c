package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "spillway.yaml")
	if err := os.WriteFile(bad, []byte("queues:\n  - name: q\n    limits: [{key: global, rate: ten}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		args    []string
		wantOut string // in stdout
		wantErr string // in the error; "" for none
	}{
		{"help flag", []string{"--help"}, "admitter --dev [--config FILE]", ""},
		{"help word", []string{"help"}, "Configuration: flags > SPILLWAY_* environment", ""},
		{"no config", nil, "", "give --config FILE, or --dev"},
		{"stray argument", []string{"--dev", "extra"}, "", `unexpected argument "extra" (see admitter --help)`},
		{"bad failure mode", []string{"--dev", "--failure-mode", "maybe"}, "", `--failure-mode "maybe": want open, closed or local`},
		{"bad log level", []string{"--dev", "--log-level", "loud"}, "", `--log-level "loud"`},
		{"invalid file", []string{"--config", bad}, "", `spillway.yaml:3: queues[0].limits[0].rate: expected a rate such as "10/s", got "ten"`},
		{"missing file", []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, "", "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, func(string) string { return "" }, &stdout, &stderr, nil)
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tt.wantOut)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
