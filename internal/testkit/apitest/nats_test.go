package apitest_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/internal/testkit/apitest"
)

func TestNATSSchemaIsValid(t *testing.T) {
	if err := apitest.LintNATS(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckNATSFailsUndescribedReplies is the NATS checker's negative
// test: each reply departs from the schema in one way; the described
// ones pass.
func TestCheckNATSFailsUndescribedReplies(t *testing.T) {
	t.Parallel()
	status := func(s string) nats.Header { return nats.Header{"Spillway-Status": {s}} }
	for _, c := range []struct {
		name    string
		subject string
		reqH    nats.Header
		body    string
		header  nats.Header
		fails   string
	}{
		{"admitted", "spillway.submit.q", nats.Header{"Spillway-Cost": {"2"}}, `{"id":"x","queue":"q","status":"admitted"}`, status("admitted"), ""},
		{"shadowed", "spillway.submit.q", nil, `{"id":"x","queue":"q","status":"queued","position":1}`,
			nats.Header{"Spillway-Status": {"queued"}, "Spillway-Shadow": {"strict would-reject"}}, ""},
		{"error", "spillway.submit.q", nil, `{"queue":"q","status":"error","type":"https://spillway.dev/problems/bad-cost","error":"no"}`, status("error"), ""},
		{"undescribed property", "spillway.submit.q", nil, `{"queue":"q","status":"admitted","surprise":1}`, status("admitted"), "surprise"},
		{"no status header", "spillway.submit.q", nil, `{"queue":"q","status":"admitted"}`, nil, "Spillway-Status"},
		{"undescribed header", "spillway.submit.q", nil, `{"queue":"q","status":"admitted"}`,
			nats.Header{"Spillway-Status": {"admitted"}, "X-Other": {"1"}}, "X-Other"},
		{"error without a type", "spillway.submit.q", nil, `{"queue":"q","status":"error","error":"no"}`, status("error"), "type"},
		{"unknown problem type", "spillway.submit.q", nil, `{"queue":"q","status":"error","error":"no","type":"https://spillway.dev/problems/nope"}`, status("error"), "nope"},
		{"taken with a bad cost", "spillway.submit.q", nats.Header{"Spillway-Cost": {"0"}}, `{"id":"x","queue":"q","status":"admitted"}`, status("admitted"), "Spillway-Cost"},
		{"batch", "spillway.submitbatch.q", nil, `{"queue":"q","results":[{"queue":"q","status":"admitted","id":"x","shadow":["t would-queue"]}]}`, nil, ""},
		{"batch result property", "spillway.submitbatch.q", nil, `{"queue":"q","results":[{"queue":"q","status":"admitted","odd":true}]}`, nil, "odd"},
		{"unreadable batch", "spillway.submitbatch.q", nil, `{"queue":"q","results":null,"status":"error","type":"https://spillway.dev/problems/bad-request","error":"no","field":"body"}`, status("error"), ""},
		{"batch of no results", "spillway.submitbatch.q", nil, `{"queue":"q","results":[]}`, nil, "minItems"},
		{"cancelled", "spillway.cancel.q", nil, `{"id":"x","queue":"q","status":"cancelled"}`, status("cancelled"), ""},
		{"cancel with a submit status", "spillway.cancel.q", nil, `{"id":"x","queue":"q","status":"admitted"}`, status("admitted"), "admitted"},
	} {
		err := apitest.CheckNATS(&nats.Msg{Subject: c.subject, Header: c.reqH}, &nats.Msg{Data: []byte(c.body), Header: c.header})
		switch {
		case c.fails == "" && err != nil:
			t.Errorf("%s: a described reply failed: %v", c.name, err)
		case c.fails != "" && (err == nil || !strings.Contains(err.Error(), c.fails)):
			t.Errorf("%s: want a failure saying %q, got %v", c.name, c.fails, err)
		}
	}
}
