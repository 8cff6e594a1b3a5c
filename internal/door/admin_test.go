package door_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/door"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

const adminKey = "adm1n-0123456789abcdef"

const pauseConfig = `
queues:
  - name: mail
    limits:
      - {key: "header:X-Client", algorithm: leaky_bucket, rate: 10/s, burst: 10}
    backlog: {capacity: 100, leak_rate: 1/s}
`

// TestPauseAuth: the admin endpoints take an admin key (200); a submit
// key is 403 forbidden, no key or a key that is none 401. Pause writes
// the queue's entry with the admin key's fingerprint, never the key;
// GET /v1/queues shows it; resume clears it; submissions go on.
func TestPauseAuth(t *testing.T) {
	t.Parallel()
	keys, err := door.LoadAPIKeys(writeFile(t, "keys", testKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	admins, err := door.LoadAPIKeys(writeFile(t, "admin-keys", "# operators\n"+adminKey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, pauseConfig, setupOptions{keys: keys, adminKeys: admins})
	pause := func(key, body string) response {
		t.Helper()
		var h []string
		if key != "" {
			h = []string{"Authorization", "Bearer " + key}
		}
		return b.do(t, http.MethodPost, "/v1/queues/mail/pause", strings.NewReader(body), h...)
	}
	for _, c := range []struct {
		name, key string
		code      int
		typ       string
	}{
		{"a submit key", testKey, http.StatusForbidden, spillway.ProblemForbidden},
		{"no key", "", http.StatusUnauthorized, spillway.ProblemUnauthorized},
		{"a key that is none", "nobody-0123456789abcdef", http.StatusUnauthorized, spillway.ProblemUnauthorized},
	} {
		if r := pause(c.key, ""); r.code != c.code || r.problem.Type != c.typ {
			t.Errorf("pause with %s: %d %s, want %d %s", c.name, r.code, r.body, c.code, c.typ)
		}
	}
	if st, err := pace.ReadPause(t.Context(), b.JS, "mail"); err != nil || st.Paused {
		t.Fatalf("after refused pauses the state is %+v, %v; want not paused", st, err)
	}

	r := pause(adminKey, `{"reason": "downstream maintenance"}`)
	var rep spillway.PauseReply
	if r.code != http.StatusOK || json.Unmarshal(r.body, &rep) != nil || !rep.Paused || rep.Reason != "downstream maintenance" {
		t.Fatalf("pause with the admin key: %d %s, want 200 paused with the reason", r.code, r.body)
	}
	if fp := door.KeyFingerprint(adminKey); rep.By != fp || strings.Contains(string(r.body), adminKey) {
		t.Errorf("pause by %q in %s: want the key's fingerprint %s and never the key", rep.By, r.body, fp)
	}
	st, err := pace.ReadPause(t.Context(), b.JS, "mail")
	if err != nil || !st.Paused || st.By != rep.By || st.Reason != rep.Reason {
		t.Errorf("the queue's pause entry: %+v, %v; want paused as answered %+v", st, err, rep)
	}
	l := b.get(t, "/v1/queues", "X-Api-Key", testKey)
	var list spillway.QueueList
	if l.code != http.StatusOK || json.Unmarshal(l.body, &list) != nil || len(list.Queues) != 1 || !list.Queues[0].Paused || list.Queues[0].PausedAt == nil {
		t.Errorf("GET /v1/queues while paused: %d %s, want the queue paused with paused_at", l.code, l.body)
	}
	// Admission goes on.
	if r := b.post(t, "mail", nil, "X-Api-Key", testKey, "X-Client", "c"); r.code != http.StatusAccepted {
		t.Errorf("a submission while paused: %d %s, want 202", r.code, r.body)
	}
	if r := pause(adminKey, `{"reason": 7}`); r.code != http.StatusBadRequest {
		t.Errorf("pause with a reason that is no string: %d %s, want 400", r.code, r.body)
	}

	res := b.do(t, http.MethodPost, "/v1/queues/mail/resume", nil, "X-Api-Key", adminKey)
	if res.code != http.StatusOK || json.Unmarshal(res.body, &rep) != nil || rep.Paused {
		t.Fatalf("resume with the admin key: %d %s, want 200 not paused", res.code, res.body)
	}
	if st, err := pace.ReadPause(t.Context(), b.JS, "mail"); err != nil || st.Paused {
		t.Errorf("after the resume the state is %+v, %v; want not paused", st, err)
	}
	if r := b.do(t, http.MethodPost, "/v1/queues/nope/resume", nil, "X-Api-Key", adminKey); r.code != http.StatusNotFound {
		t.Errorf("resume of an unknown queue: %d %s, want 404", r.code, r.body)
	}
}

// TestPauseWithoutAdminKeys: without http.admin_keys_file the admin
// endpoints answer 403 to everyone and say how to configure them.
func TestPauseWithoutAdminKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, pauseConfig, setupOptions{})
	r := b.do(t, http.MethodPost, "/v1/queues/mail/pause", nil, "X-Api-Key", adminKey)
	if r.code != http.StatusForbidden || r.problem.Type != spillway.ProblemForbidden || !strings.Contains(r.problem.Detail, "http.admin_keys_file") {
		t.Errorf("pause without admin keys: %d %s, want 403 %s naming http.admin_keys_file", r.code, r.body, spillway.ProblemForbidden)
	}
}
