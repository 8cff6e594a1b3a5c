// Package apitest checks the doors' real answers against their written
// contract (docs/design.md#contract): HTTP answers against the OpenAPI
// document internal/api/openapi.yaml, NATS replies against the JSON Schema
// internal/api/nats.schema.json.
//
// An HTTP answer passes when its path and method are an operation of the
// document, its status is one of that operation's responses, its body
// matches the response's media type and schema (with no property the
// schema does not name), and each of its headers is one the response
// declares, or a standard one (Content-Type, Content-Length, Date, …).
// A path the document does not have must be answered 404, and a known path
// asked with a method it does not have 405 with Allow, both as problem
// documents; HEAD is checked as the GET of its path, without a body.
//
// Tests use it through their HTTP clients:
//
//	client := apitest.Client(t, nil) // or apitest.Client(t, srv.Client())
//
// and through their NATS requests (nats.go).
package apitest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/spillway-dev/spillway/internal/api"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// standardHeaders are answer headers every response may carry without the
// document declaring them: the message's framing and those net/http sets.
var standardHeaders = []string{
	"Content-Type", "Content-Length", "Content-Encoding", "Date",
	"Transfer-Encoding", "Connection", "Keep-Alive", "Vary", "Trailer",
}

// contract is the loaded OpenAPI document and its validator.
type contract struct {
	doc    libopenapi.Document
	model  *v3.Document
	v      validator.Validator
	schema schema_validation.SchemaValidator
	// mu serializes validations: the validator's caches are not
	// documented as safe for concurrent use.
	mu sync.Mutex
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPIYAML())
	if err != nil {
		return nil, fmt.Errorf("apitest: openapi.yaml: %w", err)
	}
	v, errs := validator.NewValidator(doc, config.WithStrictMode())
	if len(errs) > 0 {
		return nil, fmt.Errorf("apitest: openapi.yaml: %w", errors.Join(errs...))
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("apitest: openapi.yaml: %w", err)
	}
	return &contract{doc: doc, model: &m.Model, v: v, schema: schema_validation.NewSchemaValidator()}, nil
})

// Lint validates the OpenAPI document against the OpenAPI 3.1
// specification's schema and checks what that schema cannot: every
// operation has an operationId and at least one response, every $ref
// resolves (the model builds), and every response is described.
func Lint() []string {
	c, err := loadContract()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	if ok, errs := c.v.ValidateDocument(); !ok {
		for _, e := range errs {
			out = append(out, e.Error())
		}
	}
	for path, pi := range c.model.Paths.PathItems.FromOldest() {
		for method, op := range pi.GetOperations().FromOldest() {
			where := strings.ToUpper(method) + " " + path
			if op.OperationId == "" {
				out = append(out, where+": no operationId")
			}
			if op.Responses == nil || op.Responses.Codes.Len() == 0 {
				out = append(out, where+": no responses")
				continue
			}
			for code, r := range op.Responses.Codes.FromOldest() {
				if r.Description == "" {
					out = append(out, where+" "+code+": no description")
				}
			}
		}
	}
	return out
}

// Check reports how the answer resp to req departs from the contract; nil
// when it does not. resp's body is read and put back.
func Check(req *http.Request, resp *http.Response) error {
	c, err := loadContract()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("reading the answer to %s %s: %w", req.Method, req.URL.Path, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	problems := c.check(req, resp, body)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s answered %d (%s): not as internal/api/openapi.yaml describes it:\n\t%s\nbody: %.300s",
		req.Method, req.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), strings.Join(problems, "\n\t"), body)
}

func (c *contract) check(req *http.Request, resp *http.Response, body []byte) []string {
	if p := req.URL.EscapedPath(); cleanPath(p) != p {
		// net/http's mux redirects to the clean path (of the path as
		// sent, escaped) before any route.
		return c.checkRedirect(resp)
	}
	path, pi := c.route(req.URL.Path)
	if pi == nil {
		return c.checkProblem(resp, body, http.StatusNotFound, nil)
	}
	method := strings.ToLower(req.Method)
	if req.Method == http.MethodHead {
		method = "get"
	}
	op, ok := pi.GetOperations().Get(method)
	if !ok || op == nil {
		if resp.StatusCode == http.StatusNotFound && notServed(pi) {
			return c.checkProblem(resp, body, http.StatusNotFound, nil)
		}
		return c.checkProblem(resp, body, http.StatusMethodNotAllowed, []string{"Allow"})
	}
	code := strconv.Itoa(resp.StatusCode)
	r, ok := op.Responses.Codes.Get(code)
	if !ok {
		return []string{fmt.Sprintf("status %d is not one of the responses of %s %s", resp.StatusCode, strings.ToUpper(method), path)}
	}
	problems := undeclaredHeaders(resp.Header, r)
	if req.Method == http.MethodHead {
		if len(body) > 0 {
			problems = append(problems, "a HEAD answer with a body")
		}
		return problems
	}
	vreq := req.Clone(req.Context())
	vreq.Body = http.NoBody
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, errs := c.v.ValidateHttpResponse(vreq, resp); !ok {
		for _, e := range errs {
			problems = append(problems, e.Error())
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return problems
}

// notServed reports whether the path is one a door may be built without
// (its GET lists the NotServed response): then every method is 404.
func notServed(pi *v3.PathItem) bool {
	if pi.Get == nil || pi.Get.Responses == nil {
		return false
	}
	r := pi.Get.Responses.Codes.GetOrZero("404")
	return r != nil && strings.HasPrefix(r.Description, "This admitter was built without")
}

// cleanPath is p as net/http's mux cleans it: no ".", ".." or empty
// segments, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := pathpkg.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// checkRedirect checks the mux's redirect of a path that is not clean.
func (c *contract) checkRedirect(resp *http.Response) []string {
	var problems []string
	if resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusMovedPermanently {
		problems = append(problems, fmt.Sprintf("a path that is not clean: want the redirect 307, got %d", resp.StatusCode))
	}
	if resp.Header.Get("Location") == "" {
		problems = append(problems, "a redirect without Location")
	}
	for name := range resp.Header {
		if name != "Location" && !slices.ContainsFunc(standardHeaders, func(s string) bool { return strings.EqualFold(s, name) }) {
			problems = append(problems, "undeclared header "+name)
		}
	}
	return problems
}

// route finds the document's path template that matches path: each
// {param} one non-empty segment, the one with the most literal segments
// first.
func (c *contract) route(path string) (string, *v3.PathItem) {
	segs := strings.Split(path, "/")
	best, bestLit := "", -1
	var found *v3.PathItem
	for tmpl, pi := range c.model.Paths.PathItems.FromOldest() {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		lit := 0
		for i, t := range ts {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && !strings.Contains(t[1:], "{") {
				if segs[i] == "" {
					lit = -1
					break
				}
				continue
			}
			if t != segs[i] {
				lit = -1
				break
			}
			lit++
		}
		if lit > bestLit {
			best, bestLit, found = tmpl, lit, pi
		}
	}
	return best, found
}

// checkProblem checks an answer to a request the document has no
// operation for: status want, a problem document of the Problem schema,
// and the named headers.
func (c *contract) checkProblem(resp *http.Response, body []byte, want int, headers []string) []string {
	var problems []string
	if resp.StatusCode != want {
		problems = append(problems, fmt.Sprintf("no operation of the document matches: want status %d, got %d", want, resp.StatusCode))
	}
	for _, h := range headers {
		if resp.Header.Get(h) == "" {
			problems = append(problems, "no "+h+" header")
		}
	}
	for name := range resp.Header {
		if !slices.ContainsFunc(append(headers, standardHeaders...), func(s string) bool { return strings.EqualFold(s, name) }) {
			problems = append(problems, "undeclared header "+name)
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != spillway.ProblemContentType {
		return append(problems, "Content-Type "+ct+": want "+spillway.ProblemContentType)
	}
	schema := c.model.Components.Schemas.GetOrZero("Problem").Schema()
	if ok, errs := c.schema.ValidateSchemaBytes(schema, body); !ok {
		for _, e := range errs {
			problems = append(problems, e.Error())
		}
	}
	return problems
}

// undeclaredHeaders lists the answer's headers that r does not declare
// and that are not standard.
func undeclaredHeaders(h http.Header, r *v3.Response) []string {
	var out []string
	for name := range h {
		if slices.ContainsFunc(standardHeaders, func(s string) bool { return strings.EqualFold(s, name) }) {
			continue
		}
		declared := false
		if r.Headers != nil {
			for k := range r.Headers.KeysFromOldest() {
				if strings.EqualFold(k, name) {
					declared = true
					break
				}
			}
		}
		if !declared {
			out = append(out, fmt.Sprintf("undeclared header %s: %q", name, h.Values(name)))
		}
	}
	slices.Sort(out)
	return out
}

// Transport returns a RoundTripper that sends through rt (nil:
// http.DefaultTransport) and fails t for each answer the contract does not
// describe (Check).
func Transport(t testing.TB, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	if ct, ok := rt.(*checking); ok {
		return ct // already checked
	}
	return &checking{t: t, next: rt}
}

type checking struct {
	t    testing.TB
	next http.RoundTripper
}

func (c *checking) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if err := Check(req, resp); err != nil {
		c.t.Errorf("apitest: %v", err)
	}
	return resp, nil
}

// Client returns a copy of c (nil: a client with a 10 s timeout) whose
// answers are checked against the contract (Transport).
func Client(t testing.TB, c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	cc := *c
	cc.Transport = Transport(t, c.Transport)
	return &cc
}

// CloseIdleConnections closes the idle connections of the transport
// underneath, as http.Client.CloseIdleConnections expects.
func (c *checking) CloseIdleConnections() {
	if ci, ok := c.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
