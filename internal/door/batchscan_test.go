package door

import (
	"reflect"
	"strings"
	"testing"
)

// scanBodies are batch bodies, plain and not: scanBatch must read the
// plain ones to decodeBatch's jobs and leave the others to it.
var scanBodies = []struct {
	body   string
	ndjson bool
	plain  bool
}{
	{`[{"headers": {"X-Client": "a"}, "payload": "one"}]`, false, true},
	{" [ {\"headers\":{\"X-Client\":\"a\",\"Idempotency-Key\":\"k\"},\"payload_base64\":\"AP+A\"} ,\n{\"payload\": \"ü€\"}, {}, {\"headers\": {}}, {\"payload\": \"\"} ]\n", false, true},
	{"{\"headers\": {\"X-Client\": \"a\"}, \"payload\": \"one\"}\n{\"payload_base64\": \"\"}\n\n", true, true},
	{`{"payload": "a"}{"payload": "b"}`, true, true},
	{`[{"headers": {"X-Client": "a", "X-Client": "b"}}]`, false, true},
	// Not plain: escapes, other spellings, null, numbers, duplicates,
	// both payloads, bad base64, empty names, empty batches, syntax.
	{`[{"payload": "a\"b"}]`, false, false},
	{`[{"Payload": "a"}]`, false, false},
	{`[{"headers": null}]`, false, false},
	{`[{"payload": null}]`, false, false},
	{`[{"payload": 1}]`, false, false},
	{`[{"headers": {"X-Client": 1}}]`, false, false},
	{`[{"payload": "a", "payload": "b"}]`, false, false},
	{`[{"payload": "a", "payload_base64": "YQ=="}]`, false, false},
	{`[{"payload_base64": "not base64!"}]`, false, false},
	{`[{"headers": {"": "a"}}]`, false, false},
	{`[{"other": "a"}]`, false, false},
	{`[]`, false, false},
	{``, true, false},
	{`[{"payload": "a"},]`, false, false},
	{`[{"payload": "a"}] x`, false, false},
	{`[{"payload": "a"}`, false, false},
	{`{"payload": "a"}`, false, false},
	{`[{"payload": "a"}]`, true, false},
	{"[{\"payload\": \"\xff\"}]", false, false},
	{`[{"payload": "` + strings.Repeat("x", 65) + `"}]`, false, false},
}

func TestScanBatchReadsAsDecodeBatch(t *testing.T) {
	for _, c := range scanBodies {
		checkScan(t, []byte(c.body), c.ndjson, c.plain)
	}
}

// checkScan checks scanBatch against decodeBatch on body (maxPayload 64);
// plain: scanBatch must read it.
func checkScan(t *testing.T, body []byte, ndjson, plain bool) {
	t.Helper()
	got, ok := scanBatch(body, ndjson, 64)
	want, err := decodeBatch(body, ndjson, 64)
	if ok && err != nil {
		t.Errorf("%q: scanBatch read it, decodeBatch refused it: %v", body, err)
		return
	}
	if ok && !reflect.DeepEqual(got, want) {
		t.Errorf("%q: scanBatch read %+v, decodeBatch %+v", body, got, want)
	}
	if plain && !ok {
		t.Errorf("%q: scanBatch left a plain body to decodeBatch", body)
	}
}

func FuzzScanBatch(f *testing.F) {
	for _, c := range scanBodies {
		f.Add([]byte(c.body), c.ndjson)
	}
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		checkScan(t, body, ndjson, false)
	})
}
