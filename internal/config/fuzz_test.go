package config

import (
	"os"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/yamlpos"
)

// FuzzLoad feeds arbitrary bytes to the file parser: it must not panic or
// hang, and every problem must name the file (and a line, for problems of
// the file itself).
func FuzzLoad(f *testing.F) {
	seed, err := os.ReadFile("testdata/spillway.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(devYAML))
	f.Add([]byte(minimal))
	f.Add([]byte(fileWithEverything))
	f.Add([]byte("x-a: &a {<<: *a}\nqueues: [{<<: *a}]\n"))
	f.Add([]byte("queues:\n  - &q {name: a, limits: [*q], backlog: *q, handler: {http: *q}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		c, problems := parse(name, data, nil, Overrides{})
		if c == nil {
			t.Fatal("parse returned no Config")
		}
		for _, p := range problems {
			if p.Source != name {
				t.Errorf("problem without the file name: %v", p)
			}
			if p.Line < 0 || p.Line > yamlpos.LastLine(data) {
				t.Errorf("problem at line %d of a %d-line file: %v", p.Line, yamlpos.LastLine(data), p)
			}
			if !strings.HasPrefix(p.Error(), name+":") {
				t.Errorf("message does not start with the file name: %s", p)
			}
		}
		if len(problems) > 0 {
			return
		}
		for _, q := range c.Queues {
			if err := q.Backlog.Validate(); err != nil {
				t.Errorf("a valid file gave an invalid backlog: %v", err)
			}
			if err := q.Retry.Validate(); err != nil {
				t.Errorf("a valid file gave an invalid retry policy: %v", err)
			}
			for _, l := range q.Limits {
				if !l.Limit.Valid() {
					t.Errorf("a valid file gave an invalid limit: %v", l)
				}
			}
		}
	})
}
