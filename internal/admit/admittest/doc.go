// Package admittest holds what the tests of the admission core
// (internal/admit) and of its doors (internal/door) build on, so that the
// two packages' tests share one copy:
//
//   - NewCore loads a configuration from YAML, creates every queue's
//     streams in memory on the test's JetStream, and opens a publisher,
//     a failover store and the idempotency bucket: admit.Options without
//     the test's own metrics and hooks.
//   - GateStore is a memory store whose decisions wait at a gate, so a
//     test can hold submissions mid-decision, as a slow store would.
//   - LoadConfig, EnsureStreams, Msgs and WaitFor are the small steps.
//
// It is for tests only: every helper takes the test's testing.TB, fails
// it on error and cleans up in its Cleanup. The NATS server itself comes
// from pkg/queue/queuetest.
package admittest
