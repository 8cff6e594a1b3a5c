package door

import (
	"net/http"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/internal/admit"
)

// BenchmarkRateLimitHeaders is the rate-limit headers of one counted
// answer, as every admitted job over HTTP carries them.
func BenchmarkRateLimitHeaders(b *testing.B) {
	rl := &admit.RateLimit{Policies: []admit.RatePolicy{{Name: "per-client", Quota: 1000000, Window: time.Second}},
		Counted: true, Remaining: 999999, Reset: time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		h := make(http.Header, 8)
		var a answerHeaders
		rateLimitHeaders(&a, rl)
		a.set(h)
		if len(h) != 5 {
			b.Fatalf("%d headers", len(h))
		}
	}
}
