package queue

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// keyEncoding is base32 in lower case without padding: only [a-z2-7].
var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// KeyTokenLen is the length of every key token.
const KeyTokenLen = 26

// KeyToken turns a client key into the subject token that stands for it:
// the first 128 bits of its SHA-256 in lower-case base32 (26 characters of
// [a-z2-7]). Whatever the key holds — '.', '*', '>', spaces, NUL, invalid
// UTF-8, megabytes — the token is one valid subject token, and the key
// itself never appears in a subject (nor in anything that logs subjects).
// Two keys share a token with probability about n²/2¹²⁹.
func KeyToken(key string) string {
	sum := sha256.Sum256([]byte(key))
	return keyEncoding.EncodeToString(sum[:16])
}

// SubjectRoot begins every subject of a queue's streams.
const SubjectRoot = "spillway."

// subjectOf is the one place a stream subject is spelled:
// spillway.<destination>.<queue>.<token>. In the backlog and DEAD, token is
// a KeyToken, or "*" for a filter matching every key of the normal class;
// in the backlog, the jobs of the other priority classes have a subject of
// their own (classSubject), so that the drain reads each key's jobs of a
// class in order without reading the others. In READY, token is the job's
// id (ReadySubject), or "*" for every job.
func subjectOf(queue string, d Destination, token string) string {
	return SubjectRoot + d.String() + "." + queue + "." + token
}

// classSubject is the subject of a job of class p: in the backlog, a high
// or low job of a key lands on spillway.backlog.<queue>.<class>.<token>;
// every other job on subjectOf's subject.
func classSubject(queue string, d Destination, p spillway.Priority, token string) string {
	if d != Backlog || p == spillway.Normal {
		return subjectOf(queue, d, token)
	}
	return SubjectRoot + d.String() + "." + queue + "." + p.String() + "." + token
}

// SubjectFilter matches every subject of a queue's destination: the
// stream's subject, and a filter over all its keys (and, in the backlog,
// all its classes).
func SubjectFilter(queue string, d Destination) string {
	if d == Backlog {
		return SubjectRoot + d.String() + "." + queue + ".>"
	}
	return subjectOf(queue, d, "*")
}

// GrantSubject is where the drain's leader publishes a queue's grants.
func GrantSubject(queue string) string {
	return SubjectRoot + "grants." + queue
}

// ReadySubject is where job id of queue q waits in READY:
// spillway.ready.<queue>.<id>. One subject per job, so that a reader finds
// the job by its id alone (a direct get of the subject's last message,
// FindReady), and JetStream keeps no per-key index of READY to walk on each
// ack. A job's key is in its headers (spillway.HeaderKey).
func ReadySubject(q, id string) string {
	return subjectOf(q, Ready, id)
}

// validIDToken reports whether id can be a subject's last token: not
// empty, and no '.', '*', '>', space or control character. A job id made
// by NewJobID is one.
func validIDToken(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c <= ' ', c == 0x7f, c == '.', c == '*', c == '>':
			return false
		}
	}
	return true
}

// SubjectToken is a stream subject's last token: in the backlog and DEAD
// the key token, which a move between them keeps, so a job stays under its
// key; in READY the job's id (a move out of READY takes the key token from
// the job's key header instead).
func SubjectToken(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// SubjectClass is the priority class of a backlog subject.
func SubjectClass(subject string) spillway.Priority {
	rest := subject[:strings.LastIndexByte(subject, '.')]
	switch rest[strings.LastIndexByte(rest, '.')+1:] {
	case "high":
		return spillway.High
	case "low":
		return spillway.Low
	}
	return spillway.Normal
}

// BacklogSubjects matches the subjects of every queue's backlog: a filter
// for listing the backlog streams alone.
const BacklogSubjects = SubjectRoot + "backlog.>"

// KeyHash is a key's stable public name where the key itself should not
// show (an API listing, the drain's release counts): the first 64 bits of
// its SHA-256 in lower-case hex, 16 characters. They are the bits its
// KeyToken begins with.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// KeyHashOfToken is the KeyHash of the key whose KeyToken is token: the
// token's first 64 bits in hex (token itself if it is not a key token).
func KeyHashOfToken(token string) string {
	b, err := keyEncoding.DecodeString(token)
	if err != nil || len(b) < 8 {
		return token
	}
	return hex.EncodeToString(b[:8])
}
