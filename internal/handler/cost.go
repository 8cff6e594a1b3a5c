package handler

import (
	"strconv"
	"strings"

	"github.com/spillway-dev/spillway/pkg/queue"
)

// costActual records on j the actual cost a successful answer reports in
// spillway.HeaderCostActual (value v; empty: none). A value that is not an
// integer is recorded as -1, which the worker logs and ignores: the job
// succeeded all the same.
func costActual(j *queue.Job, v string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		n = -1
	}
	j.SetCostActual(n)
}
