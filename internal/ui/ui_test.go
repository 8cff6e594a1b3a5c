package ui_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spillway-dev/spillway/internal/ui"
)

// serve runs one request through the handler over a real connection.
// answer is what a test reads of a response once serve has read and closed
// its body.
type answer struct {
	StatusCode    int
	Header        http.Header
	ContentLength int64
}

func serve(t *testing.T, method, path string) (answer, []byte) {
	t.Helper()
	srv := httptest.NewServer(ui.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header, ContentLength: resp.ContentLength}, body
}

// inline returns the text between the page's only open and close tags.
func inline(t *testing.T, page, open, close string) string {
	t.Helper()
	if strings.Count(page, open) != 1 || strings.Count(page, close) != 1 {
		t.Fatalf("the page holds %d %s and %d %s, want one each", strings.Count(page, open), open, strings.Count(page, close), close)
	}
	i := strings.Index(page, open) + len(open)
	return page[i:strings.Index(page, close)]
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// directives splits a Content-Security-Policy into directive → sources.
func directives(t *testing.T, csp string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for d := range strings.SplitSeq(csp, ";") {
		f := strings.Fields(d)
		if len(f) == 0 {
			continue
		}
		if _, dup := out[f[0]]; dup {
			t.Errorf("CSP %q names %s twice", csp, f[0])
		}
		out[f[0]] = f[1:]
	}
	return out
}

func TestHandlerServesThePage(t *testing.T) {
	t.Parallel()
	page := string(ui.Page())
	for _, path := range []string{"/ui", "/ui/"} {
		resp, body := serve(t, http.MethodGet, path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, want 200", path, resp.StatusCode)
		}
		if string(body) != page {
			t.Errorf("GET %s: the body is not the embedded page (%d bytes, want %d)", path, len(body), len(page))
		}
		h := resp.Header
		if got := h.Get("Content-Type"); got != "text/html; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q", path, got)
		}
		for _, want := range []string{"no-cache", "no-store", "must-revalidate"} {
			if !strings.Contains(h.Get("Cache-Control"), want) {
				t.Errorf("GET %s: Cache-Control %q lacks %s", path, h.Get("Cache-Control"), want)
			}
		}
		if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", path, got)
		}

		csp := h.Get("Content-Security-Policy")
		d := directives(t, csp)
		want := map[string][]string{
			"default-src":     {"'none'"},
			"script-src":      {sha(inline(t, page, "<script>", "</script>"))},
			"style-src":       {sha(inline(t, page, "<style>", "</style>"))},
			"connect-src":     {"'self'"},
			"img-src":         {"'self'", "data:"},
			"base-uri":        {"'none'"},
			"form-action":     {"'none'"},
			"frame-ancestors": {"'none'"},
		}
		for name, sources := range want {
			if !slices.Equal(d[name], sources) {
				t.Errorf("GET %s: CSP %s is %q, want %q (policy %q)", path, name, d[name], sources, csp)
			}
		}
		for name := range d {
			if _, ok := want[name]; !ok {
				t.Errorf("GET %s: CSP has an unexpected directive %s (policy %q)", path, name, csp)
			}
		}
		for _, loose := range []string{"unsafe-inline", "unsafe-eval", "*", "http:", "https:"} {
			if strings.Contains(csp, loose) {
				t.Errorf("GET %s: CSP %q allows %s", path, csp, loose)
			}
		}
	}
}

func TestHandlerHEADAndOtherRequests(t *testing.T) {
	t.Parallel()
	get, _ := serve(t, http.MethodGet, "/ui")
	head, body := serve(t, http.MethodHead, "/ui")
	if head.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("HEAD /ui: %d with %d bytes of body, want 200 and none", head.StatusCode, len(body))
	}
	for _, name := range []string{"Content-Type", "Content-Security-Policy", "Cache-Control", "Content-Length"} {
		if head.Header.Get(name) == "" || head.Header.Get(name) != get.Header.Get(name) {
			t.Errorf("HEAD /ui: %s %q, GET has %q", name, head.Header.Get(name), get.Header.Get(name))
		}
	}
	if head.Header.Get("Content-Length") != "" && head.ContentLength != int64(len(ui.Page())) {
		t.Errorf("HEAD /ui: Content-Length %d, the page is %d bytes", head.ContentLength, len(ui.Page()))
	}

	for _, path := range []string{"/", "/uix", "/ui/x", "/ui/index.html", "/ui//"} {
		resp, body := serve(t, http.MethodGet, path)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
		if bytes.Contains(body, []byte("<script>")) {
			t.Errorf("GET %s: served the page", path)
		}
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		resp, _ := serve(t, method, "/ui")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /ui: %d Allow %q, want 405 Allow \"GET, HEAD\"", method, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
}

// TestPageIsSelfContained: the page works offline and behind a firewall,
// so it names no other origin at all, and it builds its DOM from data only
// through textContent and attributes, never by parsing HTML.
func TestPageIsSelfContained(t *testing.T) {
	t.Parallel()
	page := string(ui.Page())
	for _, bad := range []string{"http://", "https://", "ftp://", "ws://", "wss://", "@import", "<link rel=\"stylesheet\"", "<iframe"} {
		if i := strings.Index(strings.ToLower(page), bad); i >= 0 {
			t.Errorf("the page contains %q at byte %d: %q", bad, i, page[max(0, i-40):min(len(page), i+60)])
		}
	}
	attr := regexp.MustCompile(`(?i)\b(src|href|action|srcset|poster|data)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)`)
	for _, m := range attr.FindAllStringSubmatch(page, -1) {
		v := strings.Trim(m[2], `"'`)
		if !strings.HasPrefix(v, "data:") {
			t.Errorf("the page has %s=%s: only data: URLs may be referenced", m[1], m[2])
		}
	}
	for _, m := range regexp.MustCompile(`url\(([^)]*)\)`).FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(strings.Trim(m[1], `"' `), "data:") {
			t.Errorf("the page's CSS loads url(%s)", m[1])
		}
	}
	// Fetches go to absolute paths of the page's own origin only.
	fetches := regexp.MustCompile(`\bget\("([^"]*)"`).FindAllStringSubmatch(page, -1)
	var paths []string
	for _, m := range fetches {
		paths = append(paths, m[1])
	}
	if !slices.Equal(paths, []string{"/v1/queues", "/metrics", "/v1/queues/"}) {
		t.Errorf("the page fetches %q, want /v1/queues, /metrics and /v1/queues/{queue}/keys", paths)
	}
	if !strings.Contains(page, `get("/v1/queues/" + encodeURIComponent(name) + "/keys?top=" + TOP_KEYS,`) {
		t.Error("the page does not read each queue's keys from /v1/queues/{queue}/keys with the queue name escaped")
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(page, sink) {
			t.Errorf("the page uses %s: build the DOM with textContent so queue names and errors are never parsed as HTML", sink)
		}
	}
}
