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
func scanBatch(body []byte, ndjson bool, maxPayload int64) ([]batchItem, bool) {
	s := scanner{b: body}
	jobs := make([]batchItem, 0, min(admit.MaxBatch, bytes.Count(body, []byte("{"))))
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
			jobs = append(jobs, j)
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
			jobs = append(jobs, j)
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

// job reads one job object.
func (s *scanner) job(maxPayload int64) (batchItem, bool) {
	var j batchItem
	var seen [3]bool // headers, payload, payload_base64
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
			j.payload = append([]byte{}, v...)
		case "payload_base64":
			v, ok := s.str()
			if !ok || seen[1] || seen[2] {
				return false
			}
			seen[2] = true
			j.payload = make([]byte, base64.StdEncoding.DecodedLen(len(v)))
			n, err := base64.StdEncoding.Decode(j.payload, v)
			if err != nil {
				return false
			}
			j.payload = j.payload[:n]
		default:
			return false
		}
		return int64(len(j.payload)) <= maxPayload
	})
	return j, ok
}
