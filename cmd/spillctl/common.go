package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/conn"
	"github.com/spillway-dev/spillway/pkg/client"
)

// Where things are, when neither a flag nor the environment says.
const (
	defaultServer = "http://127.0.0.1:8080"
	defaultNATS   = "nats://127.0.0.1:4222"
)

// serverFlag adds --server: the admitter's HTTP API.
func serverFlag(fs *flag.FlagSet, getenv func(string) string) *string {
	return fs.String("server", envOr(getenv, "SPILLWAY_SERVER", defaultServer), "admitter HTTP API `URL` ($SPILLWAY_SERVER)")
}

// natsFlag adds --nats: the NATS server.
func natsFlag(fs *flag.FlagSet, getenv func(string) string) *string {
	return fs.String("nats", envOr(getenv, "SPILLWAY_NATS_URL", defaultNATS), "NATS server `URL` ($SPILLWAY_NATS_URL)")
}

// apiKeyFlag adds --api-key, sent as Authorization: Bearer KEY. Its
// default from the environment is not shown in --help.
func apiKeyFlag(fs *flag.FlagSet) *string {
	return fs.String("api-key", "", "send Authorization: Bearer `KEY` (default $SPILLWAY_API_KEY)")
}

// apiFlags are --server, --api-key and --timeout: how a command that
// reads the admitter's HTTP API reaches it.
type apiFlags struct {
	server, apiKey *string
	timeout        *time.Duration
}

func addAPIFlags(fs *flag.FlagSet, getenv func(string) string) apiFlags {
	return apiFlags{
		server:  serverFlag(fs, getenv),
		apiKey:  apiKeyFlag(fs),
		timeout: fs.Duration("timeout", 10*time.Second, "give up on an answer after `D`"),
	}
}

// admitter is the client the flags describe, with opts; cmd names the
// command in errors.
func (f apiFlags) admitter(cmd string, getenv func(string) string, opts ...client.Option) (*admitter, error) {
	return newAdmitter(cmd, *f.server, keyOr(*f.apiKey, getenv), *f.timeout, opts...)
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// parseArgs parses flags and positional arguments in any order ("status
// ID --json" as well as "status --json ID"); everything after "--" is
// positional. done is true when --help was asked for and printed.
func parseArgs(fs *flag.FlagSet, args []string, head string, stdout io.Writer) (positional []string, done bool, err error) {
	fs.SetOutput(io.Discard)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printFlags(stdout, fs, head)
				return nil, true, nil
			}
			return nil, false, usageErrorf("%s: %w (see %s --help)", fs.Name(), err, fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, false, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), false, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseNoArgs is parseArgs for a command that takes flags only.
func parseNoArgs(fs *flag.FlagSet, args []string, head string, stdout io.Writer) (done bool, err error) {
	pos, done, err := parseArgs(fs, args, head, stdout)
	if done || err != nil {
		return done, err
	}
	if len(pos) > 0 {
		return false, usageErrorf("%s: unexpected argument %q (see %s --help)", fs.Name(), pos[0], fs.Name())
	}
	return false, nil
}

// printFlags prints head and then every flag of fs, one a line.
func printFlags(w io.Writer, fs *flag.FlagSet, head string) {
	type line struct{ name, usage string }
	var lines []line
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		arg, u := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if arg != "" {
			name += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" && f.DefValue != "[]" {
			u += " (default " + f.DefValue + ")"
		}
		lines = append(lines, line{name, u})
		width = max(width, len(name))
	})
	var b strings.Builder
	b.WriteString(head)
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, l.name, l.usage)
	}
	fmt.Fprint(w, b.String())
}

// headerFlags collects repeated --header K=V.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ",") }

func (h *headerFlags) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(k, " \t:") {
		return fmt.Errorf("want NAME=VALUE, such as X-Api-Key=k1")
	}
	*h = append(*h, v)
	return nil
}

// each calls f with every header's name and value.
func (h headerFlags) each(f func(k, v string)) {
	for _, kv := range h {
		k, v, _ := strings.Cut(kv, "=")
		f(strings.TrimSpace(k), v)
	}
}

// admitter is the admitter's HTTP API, through pkg/client; base names
// it in messages.
type admitter struct {
	base string
	c    *client.Client
}

// newAdmitter is a client of the admitter's HTTP API at server, sending
// apiKey (none when empty), each attempt bounded by timeout; opts come
// after spillctl's own and may replace them (bench's HTTP client).
func newAdmitter(cmd, server, apiKey string, timeout time.Duration, opts ...client.Option) (*admitter, error) {
	if _, ok := httpURL(server); !ok {
		return nil, usageErrorf("%s: --server %q: want an http:// or https:// URL such as %s", cmd, server, defaultServer)
	}
	base := []client.Option{client.WithTimeout(timeout), client.WithHTTPClient(&http.Client{Timeout: timeout})}
	if apiKey != "" {
		base = append(base, client.WithAPIKey(apiKey))
	}
	c, err := client.NewHTTP(server, append(base, opts...)...)
	if err != nil {
		return nil, usageErrorf("%s: %w", cmd, err)
	}
	return &admitter{base: strings.TrimRight(server, "/"), c: c}, nil
}

// httpURL parses s as an http:// or https:// URL with a host; ok is false
// for anything else.
func httpURL(s string) (u *url.URL, ok bool) {
	u, err := url.Parse(s)
	return u, err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// connectNATS connects with a short timeout and an error that says what
// to do. The connection's credentials and inbox prefix come from the
// environment, as the admitter's and the worker's do:
// SPILLWAY_NATS_CREDS_FILE, SPILLWAY_NATS_NKEY_FILE and
// SPILLWAY_NATS_INBOX_PREFIX (a user and password go in the URL).
func connectNATS(natsURL, name string, getenv func(string) string) (*nats.Conn, error) {
	opts, err := conn.NATSOptions(conn.NATSConfig{
		CredsFile:   getenv("SPILLWAY_NATS_CREDS_FILE"),
		NkeyFile:    getenv("SPILLWAY_NATS_NKEY_FILE"),
		InboxPrefix: getenv("SPILLWAY_NATS_INBOX_PREFIX"),
	})
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(natsURL, append(opts, nats.Name(name), nats.Timeout(5*time.Second), nats.MaxReconnects(0))...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w (is nats-server running? set --nats or $SPILLWAY_NATS_URL; credentials: the URL's user info, $SPILLWAY_NATS_CREDS_FILE or $SPILLWAY_NATS_NKEY_FILE)", conn.Redact(natsURL), err)
	}
	return nc, nil
}

// unreachable says what to do about a request to the admitter at base
// that got no answer.
func unreachable(base string, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach the admitter at %s: connection refused (is it running? set --server or $SPILLWAY_SERVER)", base)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the admitter at %s did not answer in time (raise --timeout, or check the admitter's health at %s/readyz)", base, base)
	}
	return fmt.Errorf("cannot reach the admitter at %s: %w (set --server or $SPILLWAY_SERVER)", base, err)
}

// explain turns an error of the client into what spillctl prints: where
// the admitter is and what to do about an answer that got none, the
// answer's status, problem and a hint for the others.
func (a *admitter) explain(err error) error {
	var te *client.TransportError
	if errors.As(err, &te) {
		return unreachable(a.base, te.Err)
	}
	var pe *client.ProblemError
	if !errors.As(err, &pe) {
		return err
	}
	title := pe.Title
	if title == http.StatusText(pe.Status) {
		title = ""
	}
	return a.answered(pe.Status, fmt.Sprintf("%d %s", pe.Status, http.StatusText(pe.Status)), title, pe.Detail, pe.RetryAfter)
}

// answered is the error of an answer of HTTP status code (status is its
// line, "404 Not Found"), with the problem's title and detail when they
// are not empty, and a hint for what the status asks of the user.
func (a *admitter) answered(code int, status, title, detail string, retryAfter time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the admitter at %s answered %s", a.base, status)
	if title != "" {
		b.WriteString(": " + title)
	}
	if detail != "" {
		b.WriteString(": " + detail)
	}
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		b.WriteString(" (set --api-key or $SPILLWAY_API_KEY)")
	case http.StatusServiceUnavailable:
		if retryAfter > 0 {
			b.WriteString(" (retry after " + fmtDur(retryAfter) + ")")
		}
	}
	return &answerError{status: code, msg: b.String()}
}

// answerError is an answer of the admitter other than the one expected.
type answerError struct {
	status int
	msg    string
}

func (e *answerError) Error() string { return e.msg }

// isNotFound reports whether err is a 404 answer.
func isNotFound(err error) bool {
	var ae *answerError
	return errors.As(err, &ae) && ae.status == http.StatusNotFound
}

// writeJSON prints v indented, for --json.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// jsonLine is v as one line of JSON.
func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}

// fmtDur prints a duration the way people read one: 850ms, 1.2s, 42s,
// 3m05s, 2h10m, 3d04h.
func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Round(time.Millisecond)/time.Millisecond)
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", d.Round(time.Second)/time.Second)
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}

// fmtClock prints t in now's time zone: the time of day to the
// millisecond, with the date when it is not now's.
func fmtClock(t, now time.Time) string {
	t = t.In(now.Location())
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05.000")
	}
	return t.Format("2006-01-02 15:04:05.000")
}

// isTerminal reports whether r is an interactive terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// natsShown is a NATS URL as spillctl prints it: a password or token in
// its user info hidden.
func natsShown(natsURL string) string { return conn.Redact(natsURL) }
