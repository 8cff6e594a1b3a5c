package handler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
	"github.com/spillway-dev/spillway/pkg/retry"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// NATS returns a handler that sends each job as a request to cfg.Subject on
// nc and maps the reply (package doc: the reply protocol). Each request has
// cfg.Timeout (default DefaultTimeout) to be answered.
//
// The handler is safe for concurrent use.
func NATS(nc *nats.Conn, cfg NATSConfig) (worker.Handler, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nats handler: no NATS connection", ErrInvalidConfig)
	}
	if err := (Config{NATS: &cfg}).Validate(); err != nil {
		return nil, err
	}
	h := &natsHandler{nc: nc, subject: cfg.Subject, timeout: cmp.Or(cfg.Timeout, DefaultTimeout)}
	return h.handle, nil
}

type natsHandler struct {
	nc      *nats.Conn
	subject string
	timeout time.Duration
}

func (h *natsHandler) handle(ctx context.Context, j *queue.Job) error {
	rctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	m := nats.NewMsg(h.subject)
	m.Data = j.Payload
	jobHeaders(j, m.Header.Set)
	reply, err := h.nc.RequestMsgWithContext(rctx, m)
	switch {
	case err == nil:
		err = h.replyError(reply)
		if err == nil {
			costActual(j, header(reply.Header, spillway.HeaderCostActual))
		}
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("request %s: %w", h.subject, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("request %s: no reply within %v: %w", h.subject, h.timeout, context.DeadlineExceeded)
	default: // nats.ErrNoResponders, a closed connection, ...
		return fmt.Errorf("request %s: %w", h.subject, err)
	}
}

// replyError maps a reply to the handler's result.
func (h *natsHandler) replyError(reply *nats.Msg) error {
	status := strings.ToLower(strings.TrimSpace(header(reply.Header, spillway.HeaderStatus)))
	text := excerpt(header(reply.Header, spillway.HeaderError), errorTextLen)
	if status == "" {
		if text == "" {
			return nil
		}
		status = spillway.HandlerRetry
	}
	if status == spillway.HandlerOK {
		return nil
	}
	if text == "" {
		text = excerpt(string(reply.Data[:min(len(reply.Data), excerptRead)]), excerptLen)
	}
	if text == "" {
		text = "replied " + spillway.HeaderStatus + ": " + status
	}
	err := fmt.Errorf("request %s: %s", h.subject, text)
	switch status {
	case spillway.HandlerPermanent:
		return retry.Permanent(err)
	case spillway.HandlerRetry, spillway.HandlerBusy:
	default:
		err = fmt.Errorf("request %s: %s (unknown %s %q, retried)", h.subject, text, spillway.HeaderStatus, excerpt(status, 32))
	}
	d, ok := parseRetryAfter(header(reply.Header, spillway.HeaderRetryAfter), "", time.Now())
	if ok {
		err = retry.After(err, d)
	}
	if status == spillway.HandlerBusy {
		return retry.Pushback(err, d)
	}
	return err
}

// header is h's first value of name. nats.Header is case-sensitive; a
// responder written in another language may well send "spillway-status", so
// names are matched ignoring case when the exact one is absent.
func header(h nats.Header, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs[0]
		}
	}
	return ""
}
