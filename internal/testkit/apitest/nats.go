package apitest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/spillway-dev/spillway/internal/api"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// natsSchemas are the compiled parts of the NATS door's JSON Schema.
type natsSchemas struct {
	defs map[string]*jsonschema.Schema
}

var loadNATS = sync.OnceValues(func() (*natsSchemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.NATSSchema()))
	if err != nil {
		return nil, fmt.Errorf("apitest: nats.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(api.NATSSchemaID, doc); err != nil {
		return nil, fmt.Errorf("apitest: nats.schema.json: %w", err)
	}
	s := &natsSchemas{defs: map[string]*jsonschema.Schema{}}
	for _, name := range []string{"SubmitHeaders", "CancelHeaders", "BatchJob",
		"SubmitReply", "SubmitReplyHeaders", "BatchReply", "BatchReplyHeaders", "CancelReply", "CancelReplyHeaders", "JobReply", "JobReplyHeaders"} {
		if s.defs[name], err = c.Compile(api.NATSSchemaID + "#/$defs/" + name); err != nil {
			return nil, fmt.Errorf("apitest: nats.schema.json: %s: %w", name, err)
		}
	}
	return s, nil
})

// LintNATS compiles the NATS door's schema: it must be a valid JSON
// Schema 2020-12 (the compiler checks it against the meta-schema), and
// every part the checks use must be there.
func LintNATS() error {
	_, err := loadNATS()
	return err
}

// CheckNATS reports how reply, the door's answer to request, departs from
// internal/api/nats.schema.json; nil when it does not. The subject says
// which door answered: a submission, a batch, a cancel or a job read. A request that
// was taken (its reply admitted, queued or rejected) must also have
// headers the schema allows.
func CheckNATS(request, reply *nats.Msg) error {
	s, err := loadNATS()
	if err != nil {
		return err
	}
	var body, headers, reqHeaders string
	switch {
	case strings.HasPrefix(request.Subject, spillway.SubmitBatchPrefix):
		body, headers = "BatchReply", "BatchReplyHeaders"
	case strings.HasPrefix(request.Subject, spillway.SubmitPrefix):
		body, headers, reqHeaders = "SubmitReply", "SubmitReplyHeaders", "SubmitHeaders"
	case strings.HasPrefix(request.Subject, spillway.CancelPrefix):
		body, headers = "CancelReply", "CancelReplyHeaders"
	case strings.HasPrefix(request.Subject, spillway.JobPrefix):
		body, headers = "JobReply", "JobReplyHeaders"
	default:
		return fmt.Errorf("apitest: %s is no subject of the NATS door", request.Subject)
	}
	var problems []error
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(reply.Data))
	if err != nil {
		problems = append(problems, fmt.Errorf("the body is not JSON: %w", err))
	} else if err := s.defs[body].Validate(inst); err != nil {
		problems = append(problems, fmt.Errorf("the body is no %s: %w", body, err))
	}
	if err := s.defs[headers].Validate(headerInstance(reply.Header)); err != nil {
		problems = append(problems, fmt.Errorf("the headers are no %s: %w", headers, err))
	}
	switch st := reply.Header.Get(spillway.HeaderStatus); {
	case reqHeaders == "":
	case st == string(spillway.Admitted), st == string(spillway.Queued), st == string(spillway.Rejected):
		if err := s.defs[reqHeaders].Validate(headerInstance(request.Header)); err != nil {
			problems = append(problems, fmt.Errorf("a %s request's headers are no %s: %w", st, reqHeaders, err))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("the reply on %s is not as internal/api/nats.schema.json describes it: %w\nbody: %.300s",
		request.Subject, errors.Join(problems...), reply.Data)
}

// headerInstance is h as the schema sees it: an object of arrays of
// strings.
func headerInstance(h nats.Header) any {
	out := map[string]any{}
	for k, vs := range h {
		a := make([]any, len(vs))
		for i, v := range vs {
			a[i] = v
		}
		out[k] = a
	}
	return out
}

// Request sends m as a request through nc and fails t if its reply is not
// as the contract describes it (CheckNATS); it returns what
// nc.RequestMsg does.
func Request(t testing.TB, nc *nats.Conn, m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	t.Helper()
	reply, err := nc.RequestMsg(m, timeout)
	if err != nil {
		return reply, err
	}
	if err := CheckNATS(m, reply); err != nil {
		t.Errorf("apitest: %v", err)
	}
	return reply, nil
}
