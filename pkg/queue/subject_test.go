package queue_test

import (
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

func TestKeyTokenIsOneSafeToken(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, key := range []string{"", "a", "a.b", "a.*.>", "with space", "nul\x00byte", "\xff\xfe", strings.Repeat("k", 1<<20), "A", "a "} {
		tok := queue.KeyToken(key)
		checkToken(t, key, tok)
		if other, dup := seen[tok]; dup {
			t.Errorf("keys %.20q and %.20q share token %s", key, other, tok)
		}
		seen[tok] = key
	}
	// Pinned: changing the token scheme would move every key's jobs to a
	// new subject, splitting backlogs that already exist.
	if got := queue.KeyToken("client-42"); got != "gzkeqp3ihasmue25mixcyj3np4" {
		t.Fatalf("KeyToken(client-42) = %s, want the pinned gzkeqp3ihasmue25mixcyj3np4", got)
	}
}

func checkToken(t *testing.T, key, tok string) {
	t.Helper()
	if len(tok) != queue.KeyTokenLen {
		t.Fatalf("key %.20q: token %q has %d characters, want %d", key, tok, len(tok), queue.KeyTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			t.Fatalf("key %.20q: token %q has %q", key, tok, c)
		}
	}
	if strings.Contains(tok, key) && key != "" && len(key) > 3 {
		t.Fatalf("token %q contains the key %q", tok, key)
	}
}

// FuzzKeyToken: every key, however hostile, becomes one safe token.
func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{"", "a.b", "*", ">", " ", "\x00", "\xff", "ключ", "a.b.*.>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		checkToken(t, key, queue.KeyToken(key))
	})
}

func TestClassSubjects(t *testing.T) {
	for _, p := range spillway.Priorities {
		sub := queue.ClassSubject("q", queue.Backlog, "k", p)
		if queue.SubjectClass(sub) != p || queue.SubjectToken(sub) != queue.KeyToken("k") {
			t.Errorf("%v: subject %s reads back as class %v token %s", p, sub, queue.SubjectClass(sub), queue.SubjectToken(sub))
		}
		if r := queue.ClassSubject("q", queue.Ready, "k", p); r != queue.Subject("q", queue.Ready, "k") {
			t.Errorf("%v: READY subject %s, want the key's one subject", p, r)
		}
	}
}

func TestHashOfTokenIsKeyHash(t *testing.T) {
	for _, k := range []string{"", "tenant-a", "a.b*>", "\x00\xff"} {
		if got, want := queue.KeyHashOfToken(queue.KeyToken(k)), queue.KeyHash(k); got != want {
			t.Errorf("key %q: hash of its token %s, want KeyHash %s", k, got, want)
		}
	}
}
