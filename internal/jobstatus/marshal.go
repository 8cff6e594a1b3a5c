package jobstatus

import (
	"encoding/json"
	"strconv"
	"time"
)

// marshal is rec's JSON, byte for byte as json.Marshal writes it, without
// reflection: a job's record is encoded at every step a worker stores (a
// backlog job's start claim and every outcome), and json.Marshal's
// reflection over the struct was most of that encode's time. A string
// that needs escaping, or a time json.Marshal would refuse, goes to
// json.Marshal itself.
func marshal(rec Record) ([]byte, error) {
	b := make([]byte, 0, 384)
	var ok bool
	b = append(b, `{"id":`...)
	if b, ok = appendString(b, rec.ID); !ok {
		return json.Marshal(rec)
	}
	b = append(b, `,"queue":`...)
	if b, ok = appendString(b, rec.Queue); !ok {
		return json.Marshal(rec)
	}
	b = append(b, `,"state":`...)
	if b, ok = appendString(b, string(rec.State)); !ok {
		return json.Marshal(rec)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(rec.Attempts), 10)
	if rec.LastError != "" {
		b = append(b, `,"last_error":`...)
		if b, ok = appendString(b, rec.LastError); !ok {
			return json.Marshal(rec)
		}
	}
	for _, t := range [...]struct {
		key string
		at  time.Time
	}{
		{`,"enqueued_at":`, rec.EnqueuedAt}, {`,"not_before":`, rec.NotBefore}, {`,"started_at":`, rec.StartedAt},
		{`,"finished_at":`, rec.FinishedAt}, {`,"updated_at":`, rec.UpdatedAt},
	} {
		if t.at.IsZero() {
			continue
		}
		if y := t.at.Year(); y < 0 || y > 9999 {
			return json.Marshal(rec) // its error
		}
		b = append(b, t.key...)
		b = append(b, '"')
		b = t.at.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if rec.BacklogSeq != 0 {
		b = append(b, `,"backlog_seq":`...)
		b = strconv.AppendUint(b, rec.BacklogSeq, 10)
	}
	for _, s := range [...]struct{ key, v string }{
		{`,"submitter":`, rec.Submitter}, {`,"cancelled_by":`, rec.CancelledBy}, {`,"superseded_by":`, rec.SupersededBy},
	} {
		if s.v == "" {
			continue
		}
		b = append(b, s.key...)
		if b, ok = appendString(b, s.v); !ok {
			return json.Marshal(rec)
		}
	}
	return append(b, '}'), nil
}

// appendString appends s quoted, if it is printable ASCII that
// json.Marshal writes as it is; ok is false otherwise.
func appendString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}
