package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spillway-dev/spillway/pkg/client"
)

// shared is the admitter of the examples: one for all of them (each
// uses its own client keys), started by the first and stopped by TestMain.
var shared struct {
	once sync.Once
	a    *admitter
	dir  string
}

// exampleAdmitter is an admitter of testConfig in dev mode for the
// examples: an embedded JetStream server and a worker in this process.
// What the examples show is what a producer writes against a running
// admitter.
func exampleAdmitter() *admitter {
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "spillway-client-example-")
		if err != nil {
			panic(err)
		}
		shared.dir = dir
		if shared.a, err = startAdmitter(dir, testConfig); err != nil {
			panic(err)
		}
	})
	return shared.a
}

// stopShared stops the examples' admitter, if one started.
func stopShared() {
	if shared.a != nil {
		_ = shared.a.stop()
		_ = os.RemoveAll(shared.dir)
	}
}

// Submit a job over HTTP and wait for a worker to finish it.
func Example() {
	a := exampleAdmitter()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey)) // such as http://127.0.0.1:8080
	if err != nil {
		fmt.Println(err)
		return
	}
	ans, err := c.Submit(ctx, "work", []byte(`{"to":"a@example.com"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("verdict:", ans.Verdict)
	job, err := c.Wait(ctx, ans.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("state:", job.State, "after", job.Attempts, "attempt")
	// Output:
	// verdict: admitted
	// state: succeeded after 1 attempt
}

// Submit over NATS: one request to spillway.submit.<queue>, answered by
// one of the admitters.
func ExampleNewNATS() {
	a := exampleAdmitter()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	nc, err := nats.Connect(a.NATSURL()) // such as nats://127.0.0.1:4222
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	c, err := client.NewNATS(nc, client.WithAPIKey(testKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	ans, err := c.Submit(ctx, "work", []byte("fail"))
	if err != nil {
		fmt.Println(err)
		return
	}
	job, err := c.Wait(ctx, ans.ID) // watches the job's status record
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ans.Verdict, "then", job.State+":", job.LastError)
	// Output: admitted then dead: attempts exhausted (1 of 1): told to fail
}

// A rejection is an answer and an error: the error for code that only
// checks errors, the answer for when to try again.
func ExampleClient_Submit_rejected() {
	a := exampleAdmitter()
	ctx := context.Background()

	c, err := client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The queue takes one job of a client at once and queues two more.
	for range 4 {
		ans, err := c.Submit(ctx, "limited", []byte("hi"), client.WithHeader("X-Client", "tenant-1"))
		switch {
		case errors.Is(err, client.ErrRejected):
			fmt.Printf("%s: retry in about %v (%v)\n", ans.Verdict, ans.RetryAfter.Round(time.Minute), errors.Is(err, client.ErrRateLimited))
		case err != nil:
			fmt.Println(err)
			return
		default:
			fmt.Println(ans.Verdict)
		}
	}
	// Output:
	// admitted
	// queued
	// queued
	// rejected: retry in about 1m0s (true)
}

// A batch is decided job by job.
func ExampleClient_SubmitBatch() {
	a := exampleAdmitter()

	c, err := client.NewHTTP(a.httpURL(), client.WithAPIKey(testKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	var jobs []client.BatchJob
	for i := range 4 {
		jobs = append(jobs, client.BatchJob{
			Payload: fmt.Appendf(nil, "job %d", i),
			Options: []client.SubmitOption{client.WithHeader("X-Client", "tenant-2")},
		})
	}
	results, err := c.SubmitBatch(context.Background(), "limited", jobs)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, r := range results {
		fmt.Println(i, r.Answer.Verdict, r.Err != nil)
	}
	// Output:
	// 0 admitted false
	// 1 queued false
	// 2 queued false
	// 3 rejected true
}
