package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spillway-dev/spillway/pkg/client"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// TestHTTPBatchTarget: a closed loop of batches counts every job of every
// batch by its own verdict; the batches spread their jobs over the keys
// in turn, and carry the payload and the headers.
func TestHTTPBatchTarget(t *testing.T) {
	t.Parallel()
	keys := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var jobs []spillway.BatchJob
		if r.Header.Get("Content-Type") != spillway.BatchJSON || json.NewDecoder(r.Body).Decode(&jobs) != nil {
			http.Error(w, "bad batch", http.StatusBadRequest)
			return
		}
		rep := spillway.BatchReply{Queue: "q"}
		for i, j := range jobs {
			keys[j.Headers["X-Client"]]++
			if j.Payload == nil || *j.Payload != "\x01\x02" || j.Headers[spillway.HeaderCost] != "2" {
				http.Error(w, "bad job", http.StatusBadRequest)
				return
			}
			st := spillway.Admitted
			if i == 2 {
				st = spillway.Rejected
			}
			rep.Results = append(rep.Results, spillway.BatchResult{SubmitReply: spillway.SubmitReply{Queue: "q", Status: st, Type: "https://spillway.dev/problems/queue-full"}})
		}
		_ = json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(srv.Close)
	b := &Batch{Size: 3, Keys: []string{"a", "b"}, KeyHeader: "X-Client", Options: []client.SubmitOption{client.WithCost(2)}, Payload: []byte{1, 2}}
	cl, err := client.NewHTTP(srv.URL, client.WithHTTPClient(srv.Client()), client.WithRetries(0, 0), client.WithoutIdempotencyKeys())
	if err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, context.Background(), Config{Callers: 1, Count: 4, Target: &BatchTarget{Client: cl, Queue: "q", Batch: b}})
	c := rep.Counts
	if c.Admitted != 8 || c.Rejected != 4 || c.RejectedBy["queue-full"] != 4 || c.Errors != 0 {
		t.Errorf("counts %+v: want 8 admitted and 4 rejected (queue-full)", c)
	}
	if keys["a"] != 6 || keys["b"] != 6 {
		t.Errorf("jobs per key %v: want 6 each", keys)
	}
}
