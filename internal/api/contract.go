package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"gopkg.in/yaml.v3"
)

// The written contract of the doors (docs/design.md#contract): the HTTP
// API as an OpenAPI 3.1 document, kept in YAML, and the NATS door's
// request headers and replies as a JSON Schema (2020-12). The admitter
// serves the OpenAPI document at /openapi.yaml and /openapi.json; tests
// check the doors' answers against both (internal/testkit/apitest).
var (
	//go:embed openapi.yaml
	openAPIYAML []byte
	//go:embed nats.schema.json
	natsSchema []byte
)

// OpenAPIYAML is the HTTP API's OpenAPI document, as it is kept; the
// caller must not change it.
func OpenAPIYAML() []byte { return openAPIYAML }

// OpenAPIJSON is the same document in JSON; the caller must not change it.
func OpenAPIJSON() ([]byte, error) { return openAPIJSON() }

var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("api: openapi.yaml as JSON: %w", err)
	}
	return append(b, '\n'), nil
})

// NATSSchema is the NATS door's JSON Schema; its $defs name the parts
// (SubmitHeaders, SubmitReply, SubmitReplyHeaders, BatchReply, …).
func NATSSchema() []byte { return natsSchema }

// NATSSchemaID is the $id of NATSSchema.
const NATSSchemaID = "https://spillway.dev/schemas/nats-door.json"
