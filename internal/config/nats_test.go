package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestNATSIdentity reads the settings that say who a process is on NATS:
// a seed file (relative to the file, as every file setting), an inbox
// prefix, both from the environment too, and their problems by name.
func TestNATSIdentity(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "spillway.yaml")
	c, err := LoadBytes(path, []byte("nats: {nkey_file: worker.nk, inbox_prefix: _SPILLWAY_INBOX.worker}\n"+minimal), nil, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(path), "worker.nk"); c.NATS.NkeyFile != want || c.NATS.InboxPrefix != "_SPILLWAY_INBOX.worker" {
		t.Errorf("nkey_file %q inbox_prefix %q; want %q and _SPILLWAY_INBOX.worker", c.NATS.NkeyFile, c.NATS.InboxPrefix, want)
	}

	env := mapEnv{"SPILLWAY_NATS_NKEY_FILE": "/run/secrets/admitter.nk", "SPILLWAY_NATS_INBOX_PREFIX": "_SPILLWAY_INBOX.admitter"}
	if c, err = LoadBytes(path, []byte(minimal), env.get, Overrides{}); err != nil {
		t.Fatal(err)
	}
	if c.NATS.NkeyFile != "/run/secrets/admitter.nk" || c.NATS.InboxPrefix != "_SPILLWAY_INBOX.admitter" {
		t.Errorf("from the environment: nkey_file %q inbox_prefix %q", c.NATS.NkeyFile, c.NATS.InboxPrefix)
	}

	for _, tt := range []struct {
		name, file string
		env        mapEnv
		want       []string
	}{
		{"wildcard prefix", "nats: {inbox_prefix: \"_INBOX.>\"}\n", nil, []string{
			`spillway.yaml:1: nats.inbox_prefix: expected a subject prefix such as "_SPILLWAY_INBOX.worker": tokens joined by '.', without spaces, wildcards ('*', '>') or a trailing '.', got "_INBOX.>"`}},
		{"trailing dot", "nats: {inbox_prefix: _X.}\n", nil, []string{
			`spillway.yaml:1: nats.inbox_prefix: expected a subject prefix such as "_SPILLWAY_INBOX.worker": tokens joined by '.', without spaces, wildcards ('*', '>') or a trailing '.', got "_X."`}},
		{"prefix from the environment", "", mapEnv{"SPILLWAY_NATS_INBOX_PREFIX": "a b"}, []string{
			`environment: SPILLWAY_NATS_INBOX_PREFIX: expected a subject prefix such as "_SPILLWAY_INBOX.worker": tokens joined by '.', without spaces, wildcards ('*', '>') or a trailing '.', got "a b"`}},
		{"both files", "nats: {creds_file: /a.creds, nkey_file: /a.nk}\n", nil, []string{
			`spillway.yaml:1: nats.nkey_file: expected one of nats.creds_file and nats.nkey_file, not both (a credentials file holds its own nkey seed)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadBytes("spillway.yaml", []byte(tt.file+minimal), tt.env.get, Overrides{})
			if err == nil {
				t.Fatal("no error")
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
