package config

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every problem Load reports about a configuration's
// content (not about reading the file): errors.Is(err, ErrInvalid).
var ErrInvalid = errors.New("config: invalid configuration")

// Sources of a FieldError that are not a file.
const (
	SourceEnv   = "environment"
	SourceFlags = "flags"
)

// FieldError is one problem with one setting.
//
// Its message starts with where the value came from, so that an editor or a
// terminal can jump to it, and names the setting and what was expected:
//
//	spillway.yaml:12: queues[0].limits[1].rate: expected a rate such as "10/s", got "ten"
//	environment: SPILLWAY_REDIS_TIMEOUT: expected a Go duration such as "1s" or "5m", got "fast"
//	flags: worker.concurrency: expected an integer ≥ 1, got "0"
//
// Unlike most errors of the project it does not start with "config:": the
// FILE:LINE: form is what editors and terminals recognise.
type FieldError struct {
	// Source is the file name as given to Load, SourceEnv or SourceFlags.
	Source string
	// Line is the 1-based line in the file; 0 for the environment, flags,
	// and the rare YAML syntax error whose line is unknown.
	Line int
	// Field is the setting's path in the file (queues[0].backlog.leak_rate),
	// the environment variable (SPILLWAY_REDIS_URL) or the setting a flag
	// overrode (redis.url). Empty for a problem of the whole file, such as
	// YAML syntax.
	Field string
	// Problem says what was expected and what was found.
	Problem string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ValidationError is every problem found in one configuration: those of the
// file in the order of their lines, then those of the environment, then
// those of flags. Its message is one FieldError per line.
type ValidationError struct {
	Problems []*FieldError
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so that errors.As finds a *FieldError and
// errors.Is finds ErrInvalid.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}
