package queue

import (
	"strconv"
	"time"

	"github.com/spillway-dev/spillway/pkg/spillway"
)

// HeaderKeyMoves counts the times a READY job was moved to READY's tail
// because its key was at its concurrency max while its worker could hold
// no more jobs waiting (TailMove). It sets the job's next wait there: the
// more moves, the longer (docs/design.md#per-key-concurrency).
const HeaderKeyMoves = "Spillway-Key-Moves"

// KeyMoves reads h's HeaderKeyMoves: 0 if absent or not a count.
func KeyMoves(h map[string][]string) int {
	vs := h[HeaderKeyMoves]
	if len(vs) == 0 {
		return 0
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// TailMove takes the READY job src, delivered but not run, to READY's
// tail, behind the jobs published since: same subject and id, attempts
// the tries it has spent (the delivery it leaves was not one), due at
// notBefore, its HeaderKeyMoves set to moves. Its message id is the
// source's place (placeID), so a worker that dies between the copy and
// the ack, and whose successor moves the same delivery again, stores it
// once.
func TailMove(src Source, attempts int, notBefore time.Time, moves int) Move {
	return Move{
		src: src, to: Ready,
		msgID: placeID(src.Stream, src.Seq),
		set: map[string]string{
			spillway.HeaderAttempt:   strconv.Itoa(attempts),
			spillway.HeaderNotBefore: notBefore.UTC().Format(time.RFC3339Nano),
			HeaderKeyMoves:           strconv.Itoa(moves),
		},
	}
}
