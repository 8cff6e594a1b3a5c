package door

import (
	"bytes"
	"encoding/base64"
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
	// base64 longer than one chunk of base64Size: whole, padded at its
	// end; padded at a chunk's end (not base64); over maxPayload.
	{`[{"payload_base64": "` + strings.Repeat("A", 1020) + `AA=="}]`, false, false},
	{`[{"payload_base64": "` + strings.Repeat("A", 1020) + `AA==AAAA"}]`, false, false},
	{`[{"payload_base64": "` + strings.Repeat("QUJD", 21) + `"}, {"payload_base64": "QUJD"}]`, false, false},
	{`[{"payload_base64": "` + strings.Repeat("QUJD", 20) + `QQ=="}, {"payload": "a"}]`, false, true},
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
	scanned := bytes.Clone(body) // scanBatch decodes base64 payloads in place
	got, ok := scanBatch(scanned, ndjson, 64)
	if !ok && !bytes.Equal(scanned, body) {
		t.Errorf("%q: scanBatch left it to decodeBatch, changed to %q", body, scanned)
	}
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

// TestScanBatchLongBase64: payloads of a few chunks of base64Size, of
// every length about a chunk's edge, read as decodeBatch reads them.
func TestScanBatchLongBase64(t *testing.T) {
	var jobs []string
	for _, n := range []int{0, 1, 2, 3, 766, 767, 768, 769, 770, 1535, 1536, 1537, 3000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*7 + n)
		}
		jobs = append(jobs, `{"payload_base64": "`+base64.StdEncoding.EncodeToString(p)+`"}`, `{"payload": "text between"}`)
	}
	body := []byte("[" + strings.Join(jobs, ", ") + "]")
	want, err := decodeBatch(body, false, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := scanBatch(bytes.Clone(body), false, 1<<20)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("scanBatch: %v, jobs differ from decodeBatch's: %v", ok, !reflect.DeepEqual(got, want))
	}
}
