package queue_test

import (
	"context"
	"fmt"

	"github.com/spillway-dev/spillway/pkg/queue"
	"github.com/spillway-dev/spillway/pkg/queue/worker"
)

// A Go handler reports what a job really cost with Job.SetCostActual
// before it returns nil: the worker settles the job's cost at that many
// units in the tiers that charged it (the admitter gives the difference
// back, or takes it) through WorkerConfig.SettleCost, which the worker
// binary wires to the admitters.
func ExampleJob_SetCostActual() {
	var h worker.Handler = func(_ context.Context, j *queue.Job) error {
		tokens := int64(len(j.Payload)) // what the job turned out to use
		j.SetCostActual(tokens)
		return nil
	}
	j := &queue.Job{ID: "j1", Queue: "llm", Cost: 100, Payload: []byte("summarise this")}
	if err := h(context.Background(), j); err != nil {
		fmt.Println(err)
	}
	n, ok := j.CostActual()
	fmt.Println(j.Cost, n, ok)
	// Output: 100 14 true
}
