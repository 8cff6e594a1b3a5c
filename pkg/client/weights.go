package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Weights lists queue's fairness weight rules, from the configuration
// and set at run time, each saying whether it is in force; admin only
// (GET /v1/queues/{queue}/weights).
func (c *Client) Weights(ctx context.Context, queue string) (*spillway.WeightList, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	var l spillway.WeightList
	if err := c.api(ctx, "Weights", http.MethodGet, queuePath(queue)+"/weights", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// KeyWeight reads the fairness weight key gets in queue's drain, and the
// rule it comes from; admin only (GET /v1/queues/{queue}/weights/{key}).
func (c *Client) KeyWeight(ctx context.Context, queue, key string) (*spillway.KeyWeight, error) {
	return c.keyWeight(ctx, "KeyWeight", http.MethodGet, queue, key, nil)
}

// SetWeight sets a runtime weight rule of queue for pattern — a key, a
// prefix such as "tenant-*", or "*" — which the drain applies to the jobs
// already waiting within a second; admin only (PUT
// /v1/queues/{queue}/weights/{key}). weight is 1 to 1000.
func (c *Client) SetWeight(ctx context.Context, queue, pattern string, weight int) (*spillway.KeyWeight, error) {
	body, err := json.Marshal(spillway.WeightRequest{Weight: weight})
	if err != nil {
		return nil, fmt.Errorf("client: encoding the weight: %w", err)
	}
	return c.keyWeight(ctx, "SetWeight", http.MethodPut, queue, pattern, body)
}

// DeleteWeight removes queue's runtime weight rule of pattern; admin only
// (DELETE /v1/queues/{queue}/weights/{key}). A pattern with no runtime
// rule is ErrNotFound.
func (c *Client) DeleteWeight(ctx context.Context, queue, pattern string) error {
	_, err := c.keyWeight(ctx, "DeleteWeight", http.MethodDelete, queue, pattern, nil)
	return err
}

func (c *Client) keyWeight(ctx context.Context, call, method, queue, key string, body []byte) (*spillway.KeyWeight, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: %s: want a key or a pattern", ErrInvalidOption, call)
	}
	var kw spillway.KeyWeight
	out := any(&kw)
	if method == http.MethodDelete {
		out = nil
	}
	if err := c.api(ctx, call, method, queuePath(queue)+"/weights/"+url.PathEscape(key), body, out); err != nil {
		return nil, err
	}
	return &kw, nil
}
