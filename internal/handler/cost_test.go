package handler_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/spillway-dev/spillway/internal/handler"
	"github.com/spillway-dev/spillway/pkg/queue/queuetest"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// costCases: what a successful answer's Spillway-Cost-Actual records on the
// job (-1: a value that is no cost, which the worker logs and ignores).
var costCases = []struct {
	value    string
	want     int64
	reported bool
}{
	{"", 0, false},
	{"10", 10, true},
	{" 0 ", 0, true},
	{"250", 250, true},
	{"ten", -1, true},
	{"-3", -1, true},
	{"99999999999999999999", -1, true},
}

func TestHTTPCostActual(t *testing.T) {
	t.Parallel()
	for _, c := range costCases {
		srv, _ := capture(t, func(w http.ResponseWriter, _ *http.Request) {
			if c.value != "" {
				w.Header().Set(spillway.HeaderCostActual, c.value)
			}
			w.WriteHeader(http.StatusOK)
		})
		j := testJob()
		if err := mustHTTP(t, handler.HTTPConfig{URL: srv.URL}, srv.Client())(t.Context(), j); err != nil {
			t.Fatalf("%q: %v", c.value, err)
		}
		if n, ok := j.CostActual(); n != c.want || ok != c.reported {
			t.Errorf("%s %q: job's actual cost %d (reported %v), want %d (%v)", spillway.HeaderCostActual, c.value, n, ok, c.want, c.reported)
		}
	}
	// A failure's header is not read: the job did not succeed.
	srv, _ := capture(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(spillway.HeaderCostActual, "3")
		w.WriteHeader(http.StatusInternalServerError)
	})
	j := testJob()
	if err := mustHTTP(t, handler.HTTPConfig{URL: srv.URL}, srv.Client())(t.Context(), j); err == nil {
		t.Fatal("a 500 answer succeeded")
	}
	if _, ok := j.CostActual(); ok {
		t.Error("a failed answer's actual cost was recorded")
	}
}

func TestNATSCostActual(t *testing.T) {
	t.Parallel()
	srv := queuetest.Start(t)
	nc := srv.Connect(t)
	for i, c := range costCases {
		subject := "cost.jobs." + strconv.Itoa(i)
		header := map[string]string{}
		if c.value != "" {
			header["spillway-cost-actual"] = c.value // any case, as Spillway-Status
		}
		respond(t, srv.Connect(t), subject, replyWith(header, ""))
		h, err := handler.NATS(nc, handler.NATSConfig{Subject: subject})
		if err != nil {
			t.Fatal(err)
		}
		j := testJob()
		if err := h(t.Context(), j); err != nil {
			t.Fatalf("%q: %v", c.value, err)
		}
		if n, ok := j.CostActual(); n != c.want || ok != c.reported {
			t.Errorf("%s %q: job's actual cost %d (reported %v), want %d (%v)", spillway.HeaderCostActual, c.value, n, ok, c.want, c.reported)
		}
	}
}
