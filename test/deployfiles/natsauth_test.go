package deployfiles

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/internal/jobstatus"
	"github.com/spillway-dev/spillway/internal/overrides"
	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/pace"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The NATS users of deploy/nats/cluster/auth.conf, one per role
// (docs/security.md), and the configuration files that include it.
var (
	natsRoles     = []string{"admitter", "worker", "operator", "producer", "handler"}
	natsConfFiles = []string{natsClusterConf, "deploy/nats/nats.conf"}
)

// natsPasswordVar is the server's environment variable holding role's
// password.
func natsPasswordVar(role string) string {
	return "SPILLWAY_NATS_" + strings.ToUpper(role) + "_PASSWORD"
}

// internalInbox is the inbox prefix the deployments give an internal role.
func internalInbox(role string) string { return "_SPILLWAY_INBOX." + role }

// processNATSConf parses a NATS configuration file with nats-server's own
// parser, the roles' passwords taken from env (or "x" where env has none).
func processNATSConf(t *testing.T, rel string, env map[string]string) *server.Options {
	t.Helper()
	if _, ok := os.LookupEnv("SERVER_NAME"); !ok {
		t.Setenv("SERVER_NAME", "nats-0")
	}
	setNATSPasswords(t, env)
	opts, err := server.ProcessConfigFile(repoFile(t, rel))
	if err != nil {
		t.Fatalf("%s: nats-server does not accept it: %v", rel, err)
	}
	return opts
}

// setNATSPasswords sets the roles' password variables the files read, from
// env or "x".
func setNATSPasswords(t *testing.T, env map[string]string) {
	for _, role := range natsRoles {
		v := natsPasswordVar(role)
		t.Setenv(v, cmpOr(env[v], "x"))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func natsUser(opts *server.Options, name string) *server.User {
	for _, u := range opts.Users {
		if u.Username == name {
			return u
		}
	}
	return nil
}

// covers reports whether the subject pattern p matches every subject s
// matches (s may hold wildcards: a subscription).
func covers(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, tok := range pt {
		switch {
		case tok == ">":
			return i < len(st)
		case i >= len(st):
			return false
		case tok == "*":
			if st[i] == ">" {
				return false
			}
		case tok != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}

// overlaps reports whether some subject matches both patterns.
func overlaps(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		if at[i] == ">" || bt[i] == ">" {
			return true
		}
		if at[i] != "*" && bt[i] != "*" && at[i] != bt[i] {
			return false
		}
	}
	return len(at) == len(bt)
}

// permits reports whether perm lets s through: allowed by its allow list
// (or it has none) and not touched by its deny list.
func permits(perm *server.SubjectPermission, s string) bool {
	if perm == nil {
		return true
	}
	if perm.Allow != nil && !slices.ContainsFunc(perm.Allow, func(p string) bool { return covers(p, s) }) {
		return false
	}
	return !slices.ContainsFunc(perm.Deny, func(p string) bool { return overlaps(p, s) })
}

// natsUse is what a role's code publishes to and subscribes to, spelled
// with the code's own constants and builders, for a queue "email" whose
// handler subject is jobs.email (the shipped convention: handlers under
// jobs.).
type natsUse struct{ publish, subscribe []string }

func natsUses() map[string]natsUse {
	const q = "email"
	token := queue.KeyToken("client-1")
	stream := func(d queue.Destination) string { return queue.StreamName(q, d) }
	jsAPI := []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.CREATE." + stream(queue.Ready), "$JS.API.STREAM.UPDATE." + stream(queue.Backlog),
		"$JS.API.STREAM.INFO." + stream(queue.Dead), "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
		"$JS.API.STREAM.MSG.GET." + stream(queue.Backlog), "$JS.API.DIRECT.GET." + stream(queue.Backlog), "$JS.API.STREAM.MSG.DELETE." + stream(queue.Backlog),
		"$JS.API.CONSUMER.CREATE." + stream(queue.Ready), "$JS.API.CONSUMER.MSG.NEXT." + stream(queue.Ready) + ".spillway-ready",
		"$JS.API.DIRECT.GET.KV_" + pace.PacerBucket,
		"$JS.ACK." + stream(queue.Ready) + ".spillway-ready.1.2.3.4.0",
		"$JS.FC." + stream(queue.Ready) + ".x.1",
	}
	kv := func(bucket, key string) string { return "$KV." + bucket + "." + key }
	var statusKV, idemKV []string
	for i := range queue.KVShards {
		statusKV = append(statusKV, kv(queue.ShardBucket(jobstatus.Bucket, i), "01a2"))
		idemKV = append(idemKV, kv(queue.ShardBucket(admit.IdempotencyBucket, i), "k"))
	}
	ready := queue.SubjectRoot + "ready." + q + "." + token
	backlog := queue.SubjectRoot + "backlog." + q + "." + token
	backlogHigh := queue.SubjectRoot + "backlog." + q + ".high." + token
	dead := queue.SubjectRoot + "dead." + q + "." + token
	door := []string{spillway.SubmitPrefix + q, spillway.SubmitBatchPrefix + q, spillway.CancelPrefix + q, spillway.JobPrefix + "01a2"}
	doorSubs := []string{spillway.SubmitPrefix + "*", spillway.SubmitBatchPrefix + "*", spillway.CancelPrefix + "*", spillway.JobPrefix + "*"}
	return map[string]natsUse{
		"producer": {publish: door, subscribe: []string{"_INBOX.>"}},
		"admitter": {
			publish: slices.Concat(jsAPI, []string{ready, backlog, backlogHigh, dead,
				kv(overrides.Bucket, q+".tier.k"), kv(pace.PacerBucket, pace.PauseKey(q)), kv(admit.DebounceBucket, q+".k")}, statusKV, idemKV),
			subscribe: append(doorSubs, internalInbox("admitter")+".>"),
		},
		"worker": {
			publish: slices.Concat(jsAPI, []string{ready, backlog, dead, queue.GrantSubject(q),
				kv(pace.PacerBucket, pace.LeakStateKey(q)), kv(pace.PacerBucket, q+".drain-leader"), kv(pace.PacerBucket, q+".releases"),
				"jobs.email"}, statusKV),
			subscribe: []string{queue.SubjectFilter(q, queue.Backlog), internalInbox("worker") + ".>"},
		},
		"operator": {
			publish: slices.Concat(jsAPI, []string{ready, backlog, dead,
				kv(overrides.Bucket, q+".tier.k"), kv(pace.PacerBucket, pace.PauseKey(q))}, statusKV),
			subscribe: []string{internalInbox("operator") + ".>"},
		},
		"handler": {subscribe: []string{"jobs.email"}},
	}
}

// natsForbidden is what a role must not be able to do, beyond what its
// allow lists leave out.
func natsForbidden() map[string]natsUse {
	const q = "email"
	var kvAll []string
	for _, b := range []string{pace.PacerBucket, overrides.Bucket, queue.ShardBucket(jobstatus.Bucket, 0), queue.ShardBucket(admit.IdempotencyBucket, 15)} {
		kvAll = append(kvAll, "$KV."+b+".x", "$JS.API.DIRECT.GET.KV_"+b, "$JS.API.STREAM.INFO.KV_"+b)
	}
	return map[string]natsUse{
		"producer": {
			publish: slices.Concat([]string{
				queue.SubjectRoot + "ready." + q + ".t", queue.SubjectRoot + "backlog." + q + ".t", queue.SubjectRoot + "dead." + q + ".t",
				queue.GrantSubject(q), "$JS.API.STREAM.INFO." + queue.StreamName(q, queue.Ready), "$JS.API.STREAM.NAMES",
				"$JS.ACK.x", "$SYS.REQ.SERVER.PING", "jobs.email",
			}, kvAll),
			subscribe: []string{"_SPILLWAY_INBOX.>", "$JS.>", "$KV.>", "spillway.>", "spillway.backlog.>", "jobs.>", ">"},
		},
		"worker": {publish: []string{
			"$KV." + pace.PacerBucket + "." + pace.PauseKey(q), "$KV." + overrides.Bucket + ".x",
			"$KV." + queue.ShardBucket(admit.IdempotencyBucket, 3) + ".x", "$KV." + admit.DebounceBucket + ".x", "$JS.API.STREAM.DELETE." + queue.StreamName(q, queue.Ready),
			"$JS.API.STREAM.PURGE." + queue.StreamName(q, queue.Backlog),
		}},
		"handler": {publish: []string{"jobs.email", "spillway.submit.email", "$JS.API.INFO"}, subscribe: []string{"_INBOX.>", "spillway.>"}},
	}
}

// TestNATSRoles checks each shipped NATS configuration's users against
// what Spillway's code uses: every role may publish and subscribe where
// its code does, and may not where it has no business (a producer on
// the streams, the JetStream API and the buckets; a worker on pauses and
// overrides). test/natsroles proves the same against a running server.
func TestNATSRoles(t *testing.T) {
	for _, rel := range natsConfFiles {
		opts := processNATSConf(t, rel, nil)
		if opts.NoAuthUser != "" {
			t.Errorf("%s: no_auth_user %q lets a client in without logging in", rel, opts.NoAuthUser)
		}
		if len(opts.Users) != len(natsRoles) || len(opts.Nkeys) != 0 {
			t.Errorf("%s: %d users and %d nkey users, want exactly the roles %v", rel, len(opts.Users), len(opts.Nkeys), natsRoles)
		}
		for _, role := range natsRoles {
			u := natsUser(opts, role)
			if u == nil {
				t.Errorf("%s: no user %s", rel, role)
				continue
			}
			if u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil {
				t.Errorf("%s: user %s: want publish and subscribe permissions (none means everything)", rel, role)
				continue
			}
			uses, forbidden := natsUses()[role], natsForbidden()[role]
			for _, s := range uses.publish {
				if !permits(u.Permissions.Publish, s) {
					t.Errorf("%s: user %s may not publish to %s, which its code does", rel, role, s)
				}
			}
			for _, s := range uses.subscribe {
				if !permits(u.Permissions.Subscribe, s) {
					t.Errorf("%s: user %s may not subscribe to %s, which its code does", rel, role, s)
				}
			}
			for _, s := range forbidden.publish {
				if permits(u.Permissions.Publish, s) {
					t.Errorf("%s: user %s may publish to %s", rel, role, s)
				}
			}
			for _, s := range forbidden.subscribe {
				if permits(u.Permissions.Subscribe, s) {
					t.Errorf("%s: user %s may subscribe to %s", rel, role, s)
				}
			}
			// Requests to a role are answered once: admitters answer the
			// door, handlers the workers.
			if answers := role == "admitter" || role == "handler"; answers != (u.Permissions.Response != nil) {
				t.Errorf("%s: user %s: allow_responses %v, want %v", rel, role, u.Permissions.Response != nil, answers)
			}
		}
	}
}

// composeNATSRole is the NATS user a compose service logs in as: its URL's.
func composeNATSRole(t *testing.T, name string, s *service) (user, password string) {
	t.Helper()
	raw := s.Environment["SPILLWAY_NATS_URL"]
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		t.Errorf("%s: services.%s.environment.SPILLWAY_NATS_URL: want nats://ROLE:PASSWORD@nats:4222 (NATS requires a login)", composeFile, name)
		return "", ""
	}
	p, _ := u.User.Password()
	return u.User.Username(), p
}

// TestComposeNATSAuth checks compose's NATS wiring: the server runs the
// shipped single-node file with every role's password in its
// environment, each admitter and worker logs in as its role with the
// same password and takes its own inbox prefix, and NATS is published on
// the loopback client port alone.
func TestComposeNATSAuth(t *testing.T) {
	c := loadCompose(t)
	nats := c.Services["nats"]
	conf, ok := flagValue(nats.Command, "c")
	if !ok {
		conf, ok = flagValue(nats.Command, "config")
	}
	host := nats.hostFileOf(conf)
	if !ok || host == "" {
		t.Fatalf("%s: services.nats.command %q: want -c FILE, a file mounted from deploy/nats", composeFile, nats.Command)
	}
	if !slices.Contains(natsConfFiles, host) {
		t.Errorf("%s: services.nats runs %s, want one of %v (the files the roles are checked in)", composeFile, host, natsConfFiles)
	}
	for _, role := range natsRoles {
		if nats.Environment[natsPasswordVar(role)] == "" {
			t.Errorf("%s: services.nats.environment: no %s (%s's password, read by %s)", composeFile, natsPasswordVar(role), role, host)
		}
	}
	opts := processNATSConf(t, host, nats.Environment)

	for name, role := range map[string]string{"admitter-1": "admitter", "admitter-2": "admitter", "worker-1": "worker", "worker-2": "worker"} {
		s := c.Services[name]
		user, password := composeNATSRole(t, name, s)
		if user != role {
			t.Errorf("%s: services.%s logs in to NATS as %q, want the %s role", composeFile, name, user, role)
		}
		if u := natsUser(opts, user); u == nil || u.Password != password {
			t.Errorf("%s: services.%s: the password of NATS user %q is not the one %s gives it (the same variable and default)", composeFile, name, user, host)
		}
		if p := s.Environment["SPILLWAY_NATS_INBOX_PREFIX"]; p != internalInbox(role) {
			t.Errorf("%s: services.%s.environment.SPILLWAY_NATS_INBOX_PREFIX %q, want %s", composeFile, name, p, internalInbox(role))
		}
		if cfg := spillwayConfig(t, c, name); cfg.NATS.InboxPrefix != internalInbox(role) || !strings.Contains(cfg.NATS.URL, role+":") {
			t.Errorf("%s: services.%s runs with nats.url %s and inbox_prefix %q", composeFile, name, cfg.NATS.URL, cfg.NATS.InboxPrefix)
		}
	}

	// Only the loopback client port is published, and only by nats.
	natsPort := regexp.MustCompile(`(^|:)(4222|6222|8222)(/tcp)?$`)
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if name == "nats" && p == "127.0.0.1:4222:4222" {
				continue
			}
			if name == "nats" || natsPort.MatchString(p) {
				t.Errorf("%s: services.%s.ports %q: NATS may be published only as 127.0.0.1:4222:4222 (anyone who reaches it could log in with a guessed password; the monitoring port has no login at all)", composeFile, name, p)
			}
		}
	}
	if !slices.Contains(nats.Ports, "127.0.0.1:4222:4222") {
		t.Errorf("%s: services.nats.ports %q: want 127.0.0.1:4222:4222 for the examples on this machine", composeFile, nats.Ports)
	}
}
