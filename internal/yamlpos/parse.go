package yamlpos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Problem is what makes a YAML text unreadable, at its 1-based line (0:
// unknown).
type Problem struct {
	Line int
	Msg  string
}

// Parse parses data, one YAML document, into its root node: nil for an
// empty file (or one of comments only). It refuses, with the line, text
// YAML cannot hold (invalid UTF-8, control characters), syntax errors and
// a second document.
func Parse(data []byte) (root *yaml.Node, p *Problem) {
	if line, problem := checkText(data); problem != "" {
		return nil, &Problem{Line: line, Msg: problem}
	}
	// The parser is third-party code running on whatever the file holds;
	// a reload must not take the process down if it panics.
	defer func() {
		if r := recover(); r != nil {
			root, p = nil, &Problem{Msg: fmt.Sprintf("the YAML parser failed: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty, or only comments
		}
		return nil, syntax(err, data)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntax(err, data)
	default:
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, &Problem{Line: line, Msg: `expected one YAML document, found a second one (a line "---" starts a new document)`}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// syntax reports a yaml.v3 parse error with its line. yaml.v3 has no
// structured position, only its message: "yaml: line N: …" counts lines
// from 0 for parser errors ("did not find expected …") and from 1 for
// scanner errors, and leaves the line out when it is the first one; an
// unknown anchor is named without a line. TestParse pins these cases.
func syntax(err error, data []byte) *Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, m, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, m
				if isParserProblem(msg) {
					line++
				}
			}
		}
	} else if name, ok := strings.CutPrefix(msg, "unknown anchor '"); ok {
		name, _, _ = strings.Cut(name, "' referenced")
		line = lineOf(data, "*"+name)
	}
	// The end of the stream counts as a line after the last: report the
	// last line, where the unfinished construct is.
	line = max(1, min(line, LastLine(data)))
	return &Problem{Line: line, Msg: "invalid YAML: " + msg}
}

func isParserProblem(msg string) bool {
	return strings.HasPrefix(msg, "did not find expected") ||
		strings.HasPrefix(msg, "found duplicate %") ||
		msg == "found incompatible YAML document" ||
		msg == "found undefined tag handle"
}

// lineOf is the 1-based line of the first occurrence of s in data, or 1.
func lineOf(data []byte, s string) int {
	i := bytes.Index(data, []byte(s))
	if i < 0 {
		return 1
	}
	return 1 + lineBreaks(data[:i])
}

// LastLine is the line of the last character of data (1 if it is empty).
func LastLine(data []byte) int {
	n := lineBreaks(data)
	if len(data) == 0 || isBreakAt(data, len(data)-1) {
		return max(1, n)
	}
	return n + 1
}

// lineBreaks counts line breaks as YAML does: CR LF, CR, LF, NEL, LS and
// PS.
func lineBreaks(data []byte) int {
	n := 0
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch r {
		case '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				size++
			}
			n++
		case '\n', 0x85, 0x2028, 0x2029:
			n++
		}
		i += size
	}
	return n
}

// isBreakAt reports whether data ends a line at byte i (the last byte of a
// line break).
func isBreakAt(data []byte, i int) bool {
	if data[i] == '\n' || data[i] == '\r' {
		return true
	}
	r, _ := utf8.DecodeLastRune(data[:i+1])
	return r == 0x85 || r == 0x2028 || r == 0x2029
}

// checkText finds what the YAML reader refuses, so that it can be reported
// with its line: invalid UTF-8 and control characters.
func checkText(data []byte) (line int, problem string) {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return 1 + lineBreaks(data[:i]), fmt.Sprintf("invalid UTF-8 (byte 0x%02x); the file must be UTF-8 text", data[i])
		case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		case r < 0x20 || (0x7f <= r && r <= 0x9f) || r == 0xfffe || r == 0xffff:
			return 1 + lineBreaks(data[:i]), fmt.Sprintf("control character %U is not allowed in YAML", r)
		}
		i += size
	}
	return 0, ""
}
