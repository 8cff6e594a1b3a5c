package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Concurrency lists every per-key concurrency entry of queue with its max
// and its keys' overrides, from the configuration and set at run time;
// admin only (GET /v1/queues/{queue}/concurrency).
func (c *Client) Concurrency(ctx context.Context, queue string) (*spillway.ConcurrencyList, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var l spillway.ConcurrencyList
	if err := c.api(ctx, "Concurrency", http.MethodGet, queuePath(queue)+"/concurrency", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// KeyConcurrency reads the max key gets from queue's concurrency entry
// name, and where it comes from; admin only (GET
// /v1/queues/{queue}/concurrency/{name}/keys/{key}).
func (c *Client) KeyConcurrency(ctx context.Context, queue, name, key string) (*spillway.KeyConcurrencyMax, error) {
	var k spillway.KeyConcurrencyMax
	if err := c.keyOverride(ctx, "KeyConcurrency", http.MethodGet, queue, "concurrency", name, key, nil, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// SetKeyConcurrency sets a runtime override of the max of queue's
// concurrency entry name for key — a key, or a prefix such as "tenant-*"
// — stamped by every admitter on the jobs it admits within a second
// (jobs admitted before keep their max); admin only (PUT
// /v1/queues/{queue}/concurrency/{name}/keys/{key}). It returns the
// override as the admitter stored it.
func (c *Client) SetKeyConcurrency(ctx context.Context, queue, name, key string, maxJobs int) (*spillway.KeyConcurrencyMax, error) {
	body, err := json.Marshal(spillway.ConcurrencyParams{Max: maxJobs})
	if err != nil {
		return nil, fmt.Errorf("client: encoding the max: %w", err)
	}
	var k spillway.KeyConcurrencyMax
	if err := c.keyOverride(ctx, "SetKeyConcurrency", http.MethodPut, queue, "concurrency", name, key, body, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// DeleteKeyConcurrency removes key's runtime override of queue's
// concurrency entry name; admin only (DELETE
// /v1/queues/{queue}/concurrency/{name}/keys/{key}). A key with no
// runtime override is ErrNotFound.
func (c *Client) DeleteKeyConcurrency(ctx context.Context, queue, name, key string) error {
	return c.keyOverride(ctx, "DeleteKeyConcurrency", http.MethodDelete, queue, "concurrency", name, key, nil, nil)
}
