package door

import (
	"errors"
	"net/http"

	"github.com/spillway-dev/spillway/internal/admit"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// requestOf reads a submission from its headers, the same way for both
// doors and for every job of a batch (batch.go): the key headers (looked
// up by the tiers through get), Spillway-Cost, Spillway-Priority, the
// idempotency key (Idempotency-Key; on the NATS door Nats-Msg-Id too),
// the schedule (Spillway-Not-Before, Spillway-Delay, Spillway-Max-Wait:
// admit.ParseSchedule) and the trace context. get looks a header up by name, in any case. A header
// the request cannot be read with is an *admit.Error naming it; the door
// answers 400, or a batch that job's result.
//
// Every header a submission may carry is read here, so that a batch's jobs
// carry the same ones as single submissions.
func requestOf(queue string, payload []byte, get func(string) string, natsDoor bool) (*admit.Request, *admit.Error) {
	req := &admit.Request{
		Queue:          queue,
		Payload:        payload,
		Header:         get,
		NoPeer:         natsDoor,
		IdempotencyKey: get(spillway.HeaderIdempotencyKey),
		Trace:          traceHeaders(get),
	}
	if natsDoor && req.IdempotencyKey == "" {
		req.IdempotencyKey = get(spillway.HeaderMsgID)
	}
	var err error
	if req.Cost, err = parseCost(get(spillway.HeaderCost)); err != nil {
		return nil, &admit.Error{Type: spillway.ProblemBadCost, Field: spillway.HeaderCost, Detail: err.Error()}
	}
	if req.Priority, err = parsePriority(get(spillway.HeaderPriority)); err != nil {
		return nil, &admit.Error{Type: spillway.ProblemBadPriority, Field: spillway.HeaderPriority, Detail: err.Error()}
	}
	if req.Schedule, err = admit.ParseSchedule(get); err != nil {
		var bad *admit.Error
		if errors.As(err, &bad) { // the only error ParseSchedule returns
			return nil, bad
		}
		return nil, &admit.Error{Type: spillway.ProblemBadRequest, Detail: err.Error()}
	}
	return req, nil
}

// scheduleHeader reports whether field is one of the headers
// admit.ParseSchedule reads (its errors name the header).
func scheduleHeader(field string) bool {
	switch field {
	case spillway.HeaderNotBefore, spillway.HeaderDelay, spillway.HeaderMaxWait:
		return true
	}
	return false
}

// titleOf is the title of a problem document of type t that requestOf
// or a batch's reading found.
func titleOf(t string) string {
	switch t {
	case spillway.ProblemBadCost:
		return "Bad cost"
	case spillway.ProblemBadPriority:
		return "Bad priority"
	case spillway.ProblemBadRequest:
		return "Bad request"
	case spillway.ProblemTooLarge:
		return "Payload too large"
	}
	return http.StatusText(statusOf(t))
}
