package door

import (
	"bytes"
	"encoding/base64"
	"unicode/utf8"

	"github.com/spillway-dev/spillway/internal/admit"
)

// scanBatch reads a plain batch body without reflection: reading the
// body with encoding/json cost the admitter as much as deciding its jobs
// (docs/performance.md#batch-submission). Plain is what clients send:
// each job an object of the exact keys headers (an object of strings),
// payload and payload_base64 (strings), each at most once and one of the
// two payloads; strings without escapes, in valid UTF-8; 1 to
// admit.MaxBatch jobs whose payloads fit maxPayload. It returns false for
// any other body, valid or not, and decodeBatch reads that one: so every
// body scanBatch reads, decodeBatch would read to the same jobs, and
// every error is decodeBatch's, naming the job and field at fault.
//
// The jobs' payloads are body's own bytes, not copies, so that a batch
// costs one copy of its payloads (docs/reliability.md#memory): a text
// payload is the string's bytes, a base64 payload is decoded over its
// own text once the whole body has been read. So when it returns true,
// body is no longer the request's text, and the caller must not change
// it while the jobs are in use; when it returns false, body is as it came.
func scanBatch(body []byte, ndjson bool, maxPayload int64) ([]batchItem, bool) {
	s := scanner{b: body}
	jobs, ok := s.batch(ndjson, maxPayload)
	if !ok {
		return nil, false
	}
	for _, k := range s.encoded {
		jobs[k].payload = decodeInPlace(jobs[k].payload)
	}
	return jobs, true
}

// batch reads the body's jobs, leaving base64 payloads encoded (their
// jobs listed in s.encoded).
func (s *scanner) batch(ndjson bool, maxPayload int64) ([]batchItem, bool) {
	jobs := make([]batchItem, 0, min(admit.MaxBatch, bytes.Count(s.b, []byte("{"))))
	add := func(j batchItem) {
		if s.base64 {
			s.encoded = append(s.encoded, len(jobs))
		}
		jobs = append(jobs, j)
	}
	if ndjson {
		for {
			s.space()
			if s.i == len(s.b) {
				break
			}
			j, ok := s.job(maxPayload)
			if !ok || len(jobs) == admit.MaxBatch {
				return nil, false
			}
			add(j)
		}
	} else {
		s.space()
		if !s.eat('[') {
			return nil, false
		}
		for {
			s.space()
			j, ok := s.job(maxPayload)
			if !ok || len(jobs) == admit.MaxBatch {
				return nil, false
			}
			add(j)
			s.space()
			if s.eat(']') {
				break
			}
			if !s.eat(',') {
				return nil, false
			}
		}
		s.space()
		if s.i != len(s.b) {
			return nil, false
		}
	}
	return jobs, len(jobs) > 0
}

// scanner reads JSON from b, at i.
type scanner struct {
	b []byte
	i int
	// base64 says the last job's payload is base64, still encoded;
	// encoded lists such jobs.
	base64  bool
	encoded []int
}

// space skips JSON whitespace.
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat consumes c if it is next.
func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes and returns its bytes (in b).
func (s *scanner) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			// encoding/json replaces invalid UTF-8; not plain.
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// object reads an object's members, calling member with each key, the
// scanner at its value; member reads the value.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	s.space()
	if s.eat('}') {
		return true
	}
	for {
		s.space()
		k, ok := s.str()
		if !ok {
			return false
		}
		s.space()
		if !s.eat(':') {
			return false
		}
		s.space()
		if !member(k) {
			return false
		}
		s.space()
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

// job reads one job object. A base64 payload is left encoded, checked
// and measured (s.base64 set).
func (s *scanner) job(maxPayload int64) (batchItem, bool) {
	var j batchItem
	var seen [3]bool // headers, payload, payload_base64
	size := 0        // the payload's, decoded
	s.base64 = false
	ok := s.object(func(k []byte) bool {
		switch string(k) {
		case "headers":
			if seen[0] || s.i >= len(s.b) || s.b[s.i] != '{' {
				return false
			}
			seen[0] = true
			j.headers = map[string]string{}
			return s.object(func(name []byte) bool {
				v, ok := s.str()
				if !ok || len(name) == 0 {
					return false
				}
				j.headers[string(name)] = string(v)
				return true
			})
		case "payload":
			v, ok := s.str()
			if !ok || seen[1] || seen[2] {
				return false
			}
			seen[1] = true
			// Capped, so that nothing appends into the rest of the body.
			j.payload, size = v[:len(v):len(v)], len(v)
		case "payload_base64":
			v, ok := s.str()
			if !ok || seen[1] || seen[2] {
				return false
			}
			seen[2] = true
			if size, ok = base64Size(v); !ok {
				return false
			}
			j.payload, s.base64 = v[:len(v):len(v)], true
		default:
			return false
		}
		return int64(size) <= maxPayload
	})
	return j, ok
}

// base64Chunk is the text base64Size and decodeInPlace decode at a time:
// a multiple of 4, so each chunk but the last is whole quanta.
const base64Chunk = 1024

// base64Size is the decoded size of v if it is standard base64 as
// base64.StdEncoding.DecodeString reads it. v has no line breaks, which
// DecodeString would skip (str refuses control characters).
func base64Size(v []byte) (int, bool) {
	var scratch [base64Chunk / 4 * 3]byte
	n := 0
	for len(v) > 0 {
		c := min(len(v), base64Chunk)
		// Padding ends the text: within a chunk Decode refuses more after
		// it, but not the start of another chunk.
		if c < len(v) && v[c-1] == '=' {
			return 0, false
		}
		m, err := base64.StdEncoding.Decode(scratch[:], v[:c])
		if err != nil {
			return 0, false
		}
		n, v = n+m, v[c:]
	}
	return n, true
}

// decodeInPlace decodes v, standard base64 that base64Size accepted, over
// its own first bytes and returns them. Each chunk is decoded aside, then
// copied to where the decoded bytes end so far, which is never past the
// next chunk's text.
func decodeInPlace(v []byte) []byte {
	var scratch [base64Chunk / 4 * 3]byte
	n := 0
	for r := 0; r < len(v); r += base64Chunk {
		m, _ := base64.StdEncoding.Decode(scratch[:], v[r:min(r+base64Chunk, len(v))])
		n += copy(v[n:], scratch[:m])
	}
	return v[:n:n]
}
