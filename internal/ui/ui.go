// Package ui serves the admitter's /ui page: one self-contained HTML page
// (inline CSS and JavaScript, embedded in the binary, nothing fetched from
// elsewhere) that polls GET /v1/queues and GET /metrics of the admitter
// that serves it once a second and shows, per queue, the backlog depth
// over the last five minutes against its capacity, the verdict rates of
// this admitter, the leak rate, jobs in flight and the backlog's age and
// estimated drain time; and, for each queue whose backlog has jobs, a
// "Top keys" table from GET /v1/queues/{queue}/keys in the same poll and
// with the same API key: the keys with the deepest backlogs, their
// depth, oldest age, weight, priority mix and release share.
//
// The page is the same for every request, so the handler computes its
// Content-Security-Policy once: scripts and styles only by the SHA-256 of
// the page's own inline blocks, connections only to the page's origin.
package ui

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

//go:embed index.html
var page []byte

// Paths the handler answers; door mounts it at both.
const (
	Path      = "/ui"
	PathSlash = "/ui/"
)

// Handler returns the handler of GET and HEAD /ui and /ui/. Any other path
// is 404 and any other method 405, so it may be mounted on a prefix.
func Handler() http.Handler {
	csp, err := policy(page)
	if err != nil {
		// The page is embedded at build time; a test catches this.
		panic(err)
	}
	return &handler{csp: csp, length: strconv.Itoa(len(page))}
}

type handler struct {
	csp    string
	length string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path && r.URL.Path != PathSlash {
		http.Error(w, "404 page not found: the page is at "+Path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, r.Method+" "+r.URL.Path+": use GET", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Length", h.length)
	hd.Set("Content-Security-Policy", h.csp)
	hd.Set("Cache-Control", "no-cache, no-store, must-revalidate")
	hd.Set("Pragma", "no-cache")
	hd.Set("Expires", "0")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(page)
}

var (
	scriptBlock = regexp.MustCompile(`(?s)<script>(.*?)</script>`)
	styleBlock  = regexp.MustCompile(`(?s)<style>(.*?)</style>`)
)

// policy is the page's Content-Security-Policy: nothing by default; its
// one inline script and one inline style by their SHA-256; fetches to its
// own origin; images only as data: URLs (none today, but the favicon
// request must not reach anywhere else).
func policy(html []byte) (string, error) {
	scripts := scriptBlock.FindAllSubmatch(html, -1)
	styles := styleBlock.FindAllSubmatch(html, -1)
	if len(scripts) != 1 || len(styles) != 1 {
		return "", fmt.Errorf("ui: the page must hold exactly one <script> and one <style> block, has %d and %d", len(scripts), len(styles))
	}
	return strings.Join([]string{
		"default-src 'none'",
		"script-src " + hash(scripts[0][1]),
		"style-src " + hash(styles[0][1]),
		"connect-src 'self'",
		"img-src 'self' data:",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; "), nil
}

func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// Page returns a copy of the embedded page (tests and tools).
func Page() []byte { return bytes.Clone(page) }
