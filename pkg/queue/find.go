package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// FindReady reads job id of queue q in READY, by its subject
// (ReadySubject): one direct get of the subject's last message, answered
// by any of the stream's replicas (READY allows direct gets). It returns
// nil and no error when READY does not hold the job: it never did, or it
// was acked (it ran) or moved (to DEAD). id must be a job id, or at least a
// subject token; anything else is not found.
func FindReady(ctx context.Context, js jetstream.JetStream, q, id string) (*jetstream.RawStreamMsg, error) {
	if !validIDToken(id) {
		return nil, nil
	}
	subj := apiPrefix(js.Options()) + "DIRECT.GET." + StreamName(q, Ready) + "." + ReadySubject(q, id)
	r, err := js.Conn().RequestWithContext(ctx, subj, nil)
	if err != nil {
		return nil, fmt.Errorf("queue: reading job %s in %s: %w", id, StreamName(q, Ready), err)
	}
	if len(r.Data) == 0 && r.Header.Get("Status") != "" {
		if r.Header.Get("Status") == "404" {
			return nil, nil
		}
		return nil, fmt.Errorf("queue: reading job %s in %s: status %s %s", id, StreamName(q, Ready), r.Header.Get("Status"), r.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(r.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("queue: reading job %s in %s: %w", id, StreamName(q, Ready), errors.New("the answer has no sequence"))
	}
	at, _ := time.Parse(time.RFC3339Nano, r.Header.Get(jetstream.TimeStampHeaer))
	return &jetstream.RawStreamMsg{Subject: r.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: r.Header, Data: r.Data, Time: at}, nil
}

// apiPrefix is the JetStream API prefix that a context made with opts
// sends its requests to, as jetstream spells it.
func apiPrefix(opts jetstream.JetStreamOptions) string {
	switch {
	case opts.Domain != "":
		return "$JS." + opts.Domain + ".API."
	case opts.APIPrefix == "":
		return jetstream.DefaultAPIPrefix
	case !strings.HasSuffix(opts.APIPrefix, "."):
		return opts.APIPrefix + "."
	}
	return opts.APIPrefix
}
