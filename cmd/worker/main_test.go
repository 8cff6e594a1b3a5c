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
	if err := os.WriteFile(bad, []byte("queues:\n  - name: q\n    limits: [{key: global, rate: 1/s}]\n    backlog: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
	}{
		{"help", []string{"--help"}, "worker --config FILE [--queues a,b]", ""},
		{"no config", nil, "", "give --config FILE"},
		{"stray argument", []string{"--config", bad, "extra"}, "", `unexpected argument "extra" (see worker --help)`},
		{"invalid file", []string{"--config", bad}, "", "spillway.yaml:4: queues[0].backlog.leak_rate: missing"},
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
