package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte("ready\n"))
		case "/down":
			http.Error(w, "not connected to NATS", http.StatusServiceUnavailable)
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/readyz"
	_ = ln.Close()

	out, _, err := spillctl(t, "", "probe", srv.URL+"/readyz")
	if err != nil || !strings.Contains(out, "200 OK ready") {
		t.Errorf("probe of a ready endpoint: %v, output %q", err, out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{srv.URL + "/down"}, exitFailure, "503 Service Unavailable: not connected to NATS"},
		{[]string{srv.URL + "/slow", "--timeout", "50ms"}, exitFailure, "no answer within 50ms"},
		{[]string{closed}, exitFailure, "connection refused"},
		{[]string{}, exitUsage, "want one URL, got 0"},
		{[]string{"127.0.0.1:8080/readyz"}, exitUsage, "not an http:// or https:// URL"},
		{[]string{srv.URL, "--timeout", "0s"}, exitUsage, "--timeout must be positive"},
	} {
		_, _, err := spillctl(t, "", append([]string{"probe"}, c.args...)...)
		code, msg := exitStatus(err)
		if err == nil || code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("probe %v: exit %d %q, want exit %d with %q", c.args, code, msg, c.code, c.want)
		}
		if errors.Is(err, errUsageShown) {
			t.Errorf("probe %v: printed usage instead of saying what is wrong", c.args)
		}
	}
}
