package api

// SubmitBatchPrefix + queue name is the subject a producer sends a batch
// of jobs to (docs/design.md#batches).
const SubmitBatchPrefix = "spillway.submitbatch."

// Media types of a batch's body on the HTTP door.
const (
	BatchJSON   = "application/json"     // one JSON array of jobs
	BatchNDJSON = "application/x-ndjson" // one job per line
)

// BatchJob is one job of a batch: the headers a single submission would
// send (its key headers, Idempotency-Key, Spillway-Cost,
// Spillway-Priority and the other Spillway-* request headers), and its
// payload, as text (Payload) or, for bytes that are not UTF-8 text, in
// standard base64 (PayloadBase64); at most one of the two.
type BatchJob struct {
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
}

// BatchReply is the answer to a batch: one BatchResult per job, in the
// batch's order. On the NATS door a batch that could not be read is
// answered with Status "error", its problem Type, Error and Field (as
// jobs[i].field) and no Results; the HTTP door answers it with a problem
// document instead.
type BatchReply struct {
	Queue   string        `json:"queue"`
	Results []BatchResult `json:"results"`
	Status  Status        `json:"status,omitempty"`
	Type    string        `json:"type,omitempty"`
	Error   string        `json:"error,omitempty"`
	Field   string        `json:"field,omitempty"`
}

// BatchResult is one job's answer in a batch: the SubmitReply a single
// submission would get, and in Shadow the values its Spillway-Shadow
// header would carry ("<tier> <verdict>" for each shadow tier that would
// not have admitted the job; none when every one would have).
type BatchResult struct {
	SubmitReply
	Shadow []string `json:"shadow,omitempty"`
}

// MaxBatchJobs bounds the jobs of one batch.
const MaxBatchJobs = 1000
