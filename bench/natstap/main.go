// Command natstap counts the NATS operations clients make against a
// nats-server while it runs: it subscribes to ">" on the account and
// sorts every message it sees into a kind (kindOf), and when it is stopped
// (SIGINT or SIGTERM) it prints each kind and its count as JSON.
//
// A subscriber to ">" sees what clients publish on the account — stream
// publishes, KV puts, JetStream API requests, acks — and what the server
// sends to inboxes: jobs delivered to pull requests, API answers, PubAcks.
// It does not see which client sent a message, so it counts everyone on
// the account: scripts/bench-worker runs it with one client (the worker, or
// bench/workerfloor) on the server. It adds a delivery of each message to
// the server's work, so the run it taps is not one to time.
//
//	go run ./bench/natstap --nats nats://127.0.0.1:4222 >counts.json &
//	... the run ...
//	kill %1
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/nats-io/nats.go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "natstap:", err)
		os.Exit(1)
	}
}

// errUsage is a flag error, already reported with the usage.
var errUsage = errors.New("usage")

// run taps the server until ctx ends, telling stderr "natstap ready" once
// the subscription is in place, then prints the counts to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("natstap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", nats.DefaultURL, "the NATS server's `URL`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: natstap [flags]\n\nCounts the messages on the account by kind until SIGINT or SIGTERM, then\nprints the counts as JSON (scripts/bench-worker).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	// A disconnect would lose messages: the counts are then short.
	var lost, stopping atomic.Bool
	closed := make(chan struct{})
	nc, err := nats.Connect(*natsURL, nats.Name("natstap"),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			if !stopping.Load() {
				lost.Store(true)
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return fmt.Errorf("nats %s: %w", *natsURL, err)
	}
	defer nc.Close()
	var t tap
	sub, err := nc.Subscribe(">", t.count)
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "natstap ready")
	<-ctx.Done()
	// Drain: what the server sent before it took the unsubscribe is counted.
	stopping.Store(true)
	if err := nc.Drain(); err != nil {
		return err
	}
	<-closed
	if lost.Load() {
		return errors.New("the connection was lost during the run: the counts are short")
	}
	b, err := json.MarshalIndent(t.snapshot(), "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// tap counts messages by kind.
type tap struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (t *tap) count(m *nats.Msg) {
	k := kindOf(m.Subject, m.Reply, m.Header, m.Data)
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[string]int64{}
	}
	t.counts[k]++
	t.mu.Unlock()
}

func (t *tap) snapshot() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.counts))
	for k, v := range t.counts {
		out[k] = v
	}
	return out
}

// kindOf names what a message is, from its subject, reply subject,
// headers and body:
//
//	pull <stream>                         $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
//	ack <stream> +ACK double|+ACK|-NAK|+WPI|+NXT|+TERM   $JS.ACK.<stream>.… (the body says which; "double": it awaits a reply)
//	kv put|create|update|delete <bucket>  $KV.<bucket>.<key> (create: expects no record; update: a revision)
//	kv get <stream>                       $JS.API.DIRECT.GET.<stream>… ; msg get: $JS.API.STREAM.MSG.GET.<stream>
//	api <KIND> <stream>                   any other $JS.API request: STREAM.INFO, CONSUMER.INFO, CONSUMER.CREATE, …
//	delivered <stream>                    a consumer's delivery of a stored message (its reply is $JS.ACK.<stream>.…)
//	flow control                          $JS.FC.…
//	advisory <kind>                       $JS.EVENT.… (the server's; it sends them only when someone listens, as the tap does)
//	to inbox: status <code> | reply       a message to a subject whose first token starts with "_": a pull's
//	                                      status (404 no messages, 408 expired), an API answer, a PubAck, an ack's confirmation
//	publish <subject without its last token>            anything else: a stream publish such as spillway.ready.<queue>.*
//
// Numbered shards (spillway-jobs-07) count as one (spillway-jobs-NN).
func kindOf(subject, reply string, h nats.Header, data []byte) string {
	tok := strings.Split(subject, ".")
	switch {
	case strings.HasPrefix(reply, "$JS.ACK."):
		// A consumer's delivery: it goes to the pull request's inbox, but
		// a subscriber sees it under the stored message's subject.
		return "delivered " + shard(strings.SplitN(reply, ".", 4)[2])
	case strings.HasPrefix(subject, "$JS.API.CONSUMER.MSG.NEXT.") && len(tok) >= 7:
		return "pull " + shard(tok[5])
	case strings.HasPrefix(subject, "$JS.ACK.") && len(tok) >= 3:
		return "ack " + shard(tok[2]) + " " + ackKind(reply, data)
	case strings.HasPrefix(subject, "$KV.") && len(tok) >= 3:
		return "kv " + kvOp(h) + " " + shard(tok[1])
	case strings.HasPrefix(subject, "$JS.API.DIRECT.GET.") && len(tok) >= 5:
		return "kv get " + shard(tok[4])
	case strings.HasPrefix(subject, "$JS.API.STREAM.MSG.GET.") && len(tok) >= 6:
		return "msg get " + shard(tok[5])
	case strings.HasPrefix(subject, "$JS.API."):
		return "api " + apiKind(tok[2:])
	case strings.HasPrefix(subject, "$JS.FC."):
		return "flow control"
	case strings.HasPrefix(subject, "$JS.EVENT."):
		return "advisory " + strings.Join(tok[2:min(len(tok), 5)], ".")
	case strings.HasPrefix(tok[0], "_"):
		if st := h.Get("Status"); st != "" {
			return "to inbox: status " + st
		}
		return "to inbox: reply"
	}
	if len(tok) > 1 {
		tok = tok[:len(tok)-1]
	}
	return "publish " + strings.Join(tok, ".") + ".*"
}

// ackKind is an ack's body: +ACK (empty is +ACK too), -NAK, +WPI, +NXT,
// +TERM; "double" when it awaits JetStream's confirmation (AckSync).
func ackKind(reply string, data []byte) string {
	k := "+ACK"
	for _, p := range []string{"-NAK", "+WPI", "+NXT", "+TERM", "+ACK"} {
		if bytes.HasPrefix(data, []byte(p)) {
			k = p
			break
		}
	}
	if reply != "" {
		k += " double"
	}
	return k
}

// kvOp tells a KV write by its headers: a delete or purge (KV-Operation),
// a create (expects no record: last subject sequence 0), an update
// (expects a revision), or a put.
func kvOp(h nats.Header) string {
	switch op := h.Get("KV-Operation"); op {
	case "DEL":
		return "delete"
	case "PURGE":
		return "purge"
	}
	switch rev := h.Get(nats.ExpectedLastSubjSeqHdr); rev {
	case "":
		return "put"
	case "0":
		return "create"
	}
	return "update"
}

// apiKind names a JetStream API request by the tokens after $JS.API:
// INFO, STREAM.<OP> <stream>, CONSUMER.<OP> <stream>, with the two-token
// operations (STREAM.MSG.DELETE, CONSUMER.DURABLE.CREATE, …) spelled out.
func apiKind(tok []string) string {
	if len(tok) < 2 || (tok[0] != "STREAM" && tok[0] != "CONSUMER") {
		return strings.Join(tok, ".")
	}
	op, rest := tok[0]+"."+tok[1], tok[2:]
	switch tok[1] {
	case "MSG", "DURABLE", "PEER", "LEADER":
		if len(rest) > 0 {
			op, rest = op+"."+rest[0], rest[1:]
		}
	}
	if len(rest) > 0 {
		return op + " " + shard(rest[0])
	}
	return op
}

// shard writes a numbered shard's name (spillway-jobs-07, KV_spillway-jobs-07)
// as all of its shards' (…-NN).
func shard(name string) string {
	n := len(name)
	if n > 3 && name[n-3] == '-' && isDigit(name[n-2]) && isDigit(name[n-1]) {
		return name[:n-2] + "NN"
	}
	return name
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
