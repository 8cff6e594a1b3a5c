package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// The calls of the admitter's HTTP API beyond a job's: reads of its
// queues and their backlogs' keys, and the admin calls that pause and
// resume a queue and set its keys' limits at run time (they take an admin
// key: WithAPIKey with one of the admitter's http.admin_keys_file). Only
// the HTTP door serves them: on a client of the NATS door they return an
// error matching errors.ErrUnsupported, and send nothing.

// Queues lists the admitter's queues, with their backlogs' depth,
// capacity, leak rate, in-flight jobs and pause state (GET /v1/queues).
func (c *Client) Queues(ctx context.Context) ([]spillway.QueueInfo, error) {
	var list spillway.QueueList
	if err := c.api(ctx, "Queues", http.MethodGet, "/v1/queues", nil, &list); err != nil {
		return nil, err
	}
	return list.Queues, nil
}

// Queue reads one queue (GET /v1/queues/{queue}); an unknown queue is
// ErrNotFound.
func (c *Client) Queue(ctx context.Context, queue string) (*spillway.QueueInfo, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var qi spillway.QueueInfo
	if err := c.api(ctx, "Queue", http.MethodGet, queuePath(queue), nil, &qi); err != nil {
		return nil, err
	}
	return &qi, nil
}

// Keys lists the top keys of queue's backlog, the deepest first (GET
// /v1/queues/{queue}/keys?top=N; top 0: the admitter's default, 20).
func (c *Client) Keys(ctx context.Context, queue string, top int) (*spillway.KeyList, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if top < 0 || top > 1000 {
		return nil, fmt.Errorf("%w: Keys top %d: want 0 (the default) to 1000", ErrInvalidOption, top)
	}
	path := queuePath(queue) + "/keys"
	if top > 0 {
		path += "?top=" + strconv.Itoa(top)
	}
	var kl spillway.KeyList
	if err := c.api(ctx, "Keys", http.MethodGet, path, nil, &kl); err != nil {
		return nil, err
	}
	return &kl, nil
}

// Pause stops queue's workers from starting its jobs until Resume, with
// reason kept beside the pause ("" for none); admin only (POST
// /v1/queues/{queue}/pause). It returns the queue's pause state.
func (c *Client) Pause(ctx context.Context, queue, reason string) (*spillway.PauseReply, error) {
	var body []byte
	if reason != "" {
		body, _ = json.Marshal(spillway.PauseRequest{Reason: reason})
	}
	return c.pause(ctx, "Pause", queue, "pause", body)
}

// Resume lets queue's workers start its jobs again; admin only (POST
// /v1/queues/{queue}/resume). It returns the queue's pause state.
func (c *Client) Resume(ctx context.Context, queue string) (*spillway.PauseReply, error) {
	return c.pause(ctx, "Resume", queue, "resume", nil)
}

func (c *Client) pause(ctx context.Context, call, queue, verb string, body []byte) (*spillway.PauseReply, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var rep spillway.PauseReply
	if err := c.api(ctx, call, http.MethodPost, queuePath(queue)+"/"+verb, body, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Limits lists every tier of queue with its parameters and its keys'
// overrides, from the configuration and set at run time; admin only (GET
// /v1/queues/{queue}/limits).
func (c *Client) Limits(ctx context.Context, queue string) (*spillway.LimitList, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var l spillway.LimitList
	if err := c.api(ctx, "Limits", http.MethodGet, queuePath(queue)+"/limits", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// KeyLimit reads the limit key gets from queue's tier (its name or its
// index), and where it comes from; admin only (GET
// /v1/queues/{queue}/limits/{tier}/keys/{key}).
func (c *Client) KeyLimit(ctx context.Context, queue, tier, key string) (*spillway.KeyLimit, error) {
	return c.keyLimit(ctx, "KeyLimit", http.MethodGet, queue, tier, key, nil)
}

// SetKeyLimit sets a runtime override of queue's tier for key — a key, or
// a prefix such as "tenant-*" — in force on every admitter within a
// second; admin only (PUT /v1/queues/{queue}/limits/{tier}/keys/{key}).
// It returns the override as the admitter stored it.
func (c *Client) SetKeyLimit(ctx context.Context, queue, tier, key string, p spillway.LimitParams) (*spillway.KeyLimit, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the limit: %w", err)
	}
	return c.keyLimit(ctx, "SetKeyLimit", http.MethodPut, queue, tier, key, body)
}

// DeleteKeyLimit removes key's runtime override of queue's tier; admin
// only (DELETE /v1/queues/{queue}/limits/{tier}/keys/{key}). A key with
// no runtime override is ErrNotFound.
func (c *Client) DeleteKeyLimit(ctx context.Context, queue, tier, key string) error {
	_, err := c.keyLimit(ctx, "DeleteKeyLimit", http.MethodDelete, queue, tier, key, nil)
	return err
}

func (c *Client) keyLimit(ctx context.Context, call, method, queue, tier, key string, body []byte) (*spillway.KeyLimit, error) {
	var kl spillway.KeyLimit
	if err := c.keyOverride(ctx, call, method, queue, "limits", tier, key, body, &kl); err != nil {
		return nil, err
	}
	return &kl, nil
}

// keyOverride sends one call about key's override of queue's tier (of is
// "limits") or concurrency entry ("concurrency") named name, decoding
// the answer into out (not for a DELETE).
func (c *Client) keyOverride(ctx context.Context, call, method, queue, of, name, key string, body []byte, out any) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	if name == "" || key == "" {
		what := "a tier"
		if of == "concurrency" {
			what = "a concurrency entry"
		}
		return fmt.Errorf("%w: %s: want %s and a key", ErrInvalidOption, call, what)
	}
	path := queuePath(queue) + "/" + of + "/" + url.PathEscape(name) + "/keys/" + url.PathEscape(key)
	if method == http.MethodDelete {
		out = nil
	}
	return c.api(ctx, call, method, path, body, out)
}

// Metrics reads the admitter's own /metrics, in the Prometheus text
// format: its counters of decisions, stores and reads, which one
// admitter of several counts for its share of the traffic only.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	d, err := c.httpOnly("Metrics")
	if err != nil {
		return nil, err
	}
	var a answer
	_, err = c.retrying(ctx, true, func(ctx context.Context) error {
		var err error
		if a, err = d.doAccept(ctx, http.MethodGet, "/metrics", acceptText, "", nil, nil); err == nil && a.status != http.StatusOK {
			err = d.problem(a)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return a.body, nil
}

var acceptText = []string{"text/plain"}

// httpOnly is the HTTP door of c, or for a client of the NATS door an
// error matching errors.ErrUnsupported.
func (c *Client) httpOnly(call string) (*httpDoor, error) {
	d, ok := c.t.(*httpDoor)
	if !ok {
		return nil, fmt.Errorf("client: %s is a call of the admitter's HTTP API; this client uses its %s door: %w", call, c.t.name(), errors.ErrUnsupported)
	}
	return d, nil
}

// api sends one call of the HTTP API and decodes its answer of 200 into
// out (nil: expects 204 No Content). A call that got no answer or a 503
// is sent again as a submission is (WithRetries): each of these calls
// leaves the same state however often it is made. A delete only after a
// 503: sent again after a lost answer, it would find nothing to delete.
func (c *Client) api(ctx context.Context, call, method, path string, body []byte, out any) error {
	d, err := c.httpOnly(call)
	if err != nil {
		return err
	}
	contentType := ""
	if body != nil {
		contentType = "application/json"
	}
	want := http.StatusOK
	if out == nil {
		want = http.StatusNoContent
	}
	_, err = c.retrying(ctx, method != http.MethodDelete, func(ctx context.Context) error {
		a, err := d.do(ctx, method, path, contentType, body, nil)
		if err != nil {
			return err
		}
		if a.status != want {
			return d.problem(a)
		}
		if out != nil {
			if err := json.Unmarshal(a.body, out); err != nil {
				return fmt.Errorf("client: %s answered %s %s with something that is not the expected JSON: %w", d.base, method, path, err)
			}
		}
		return nil
	})
	return err
}

func queuePath(queue string) string { return "/v1/queues/" + url.PathEscape(queue) }
