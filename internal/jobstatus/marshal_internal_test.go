package jobstatus

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// marshal writes what json.Marshal writes, for records as they are stored
// and for strings and times that json.Marshal escapes or refuses.
func TestMarshalIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 5, 6, 789000000, time.UTC)
	records := []Record{
		{},
		{ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Queue: "bench", State: spillway.State("succeeded"), Attempts: 1, UpdatedAt: at},
		{ID: "x", Queue: "q", State: "failed", Attempts: 3, LastError: `500 "bad" <html> & \ back`, EnqueuedAt: at, NotBefore: at.Add(time.Nanosecond),
			StartedAt: at.Add(time.Second), FinishedAt: at.Add(time.Minute), UpdatedAt: at.Add(time.Hour), BacklogSeq: 1 << 60,
			Submitter: "fp", CancelledBy: "fp2", SupersededBy: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"},
		{ID: "é", Queue: "tab\there", State: "queued", LastError: "line\u2028sep", Submitter: "\x00\x7f"},
		{ID: "a", Attempts: -2, StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("X", 3600))},
		{ID: "a", LastError: string([]byte{0xff, 'a'})},
	}
	// records[2] sets every field: a field added to Record and not to
	// marshal then shows as a difference from json.Marshal.
	full := reflect.ValueOf(records[2])
	for i := range full.NumField() {
		if full.Field(i).IsZero() {
			t.Fatalf("records[2] leaves Record.%s zero: set it there, and write it in marshal", full.Type().Field(i).Name)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcXYZ019-_ .:\"\\<>&\n\té€\u2028")
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		r := make([]rune, rng.IntN(12))
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(r)
	}
	tm := func() time.Time {
		if rng.IntN(3) == 0 {
			return time.Time{}
		}
		return at.Add(time.Duration(rng.Int64N(int64(1000 * time.Hour)))).Round(0)
	}
	for range 2000 {
		records = append(records, Record{ID: str(), Queue: str(), State: spillway.State(str()), Attempts: rng.IntN(10), LastError: str(),
			EnqueuedAt: tm(), NotBefore: tm(), StartedAt: tm(), FinishedAt: tm(), UpdatedAt: tm(), BacklogSeq: rng.Uint64N(3) * rng.Uint64(),
			Submitter: str(), CancelledBy: str(), SupersededBy: str()})
	}
	for _, rec := range records {
		want, werr := json.Marshal(rec)
		got, err := marshal(rec)
		if !bytes.Equal(got, want) || (err == nil) != (werr == nil) {
			t.Fatalf("marshal(%#v) = %s, %v; json.Marshal: %s, %v", rec, got, err, want, werr)
		}
	}
	for _, y := range []int{-1, 10000} {
		rec := Record{ID: "a", UpdatedAt: time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)}
		if _, err := marshal(rec); err == nil {
			t.Fatalf("marshal of a record updated in year %d: no error; json.Marshal refuses it", y)
		}
	}
}
