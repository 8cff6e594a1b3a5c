package door

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// BenchmarkBatchRead reads batch bodies as the HTTP door does — the body,
// then its jobs — without deciding them: B/op is what one batch costs in
// memory before its jobs are decided (docs/reliability.md#memory).
func BenchmarkBatchRead(b *testing.B) {
	const maxPayload = 1 << 20
	big := strings.Repeat("x", 1_000_000)
	bigB64 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfe}, 750_000))
	small := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("ABC"), 64))
	for _, c := range []struct {
		name string
		n    int
		job  func(i int) string
	}{
		{"16x1MB-text", 16, func(int) string { return `{"payload": "` + big + `"}` }},
		{"16x1MB-base64", 16, func(int) string { return `{"payload_base64": "` + bigB64 + `"}` }},
		{"1000x192B-base64", 1000, func(i int) string {
			return fmt.Sprintf(`{"headers": {"X-Client": "c%d"}, "payload_base64": "%s"}`, i, small)
		}},
		// Escapes: encoding/json reads it (decodeBatch).
		{"1000x192B-escaped", 1000, func(i int) string {
			return fmt.Sprintf(`{"headers": {"X-Client": "c%d"}, "payload": "\"%s\""}`, i, small)
		}},
	} {
		jobs := make([]string, c.n)
		for i := range jobs {
			jobs[i] = c.job(i)
		}
		body := []byte("[" + strings.Join(jobs, ",") + "]")
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				r := httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/v1/queues/q/jobs:batch", bytes.NewReader(body))
				r.Header.Set("Content-Type", spillway.BatchJSON)
				w := httptest.NewRecorder()
				got, ok := readBody(w, r, 16*maxPayload, batchTooLarge)
				if !ok {
					b.Fatalf("reading the body: %d %s", w.Code, w.Body)
				}
				reqs, _, err := readBatch(got, false, "q", maxPayload, false)
				if err != nil || len(reqs) != c.n {
					b.Fatalf("%d jobs, %v", len(reqs), err)
				}
			}
		})
	}
}
