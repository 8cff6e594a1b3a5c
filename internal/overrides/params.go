package overrides

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/spillway-dev/spillway/pkg/bucket"
	"github.com/spillway-dev/spillway/pkg/spillway"
)

// Params are an override's parameters, named as a tier's in the
// configuration file and the admin API's JSON (spillway.LimitParams). Which of
// them apply is the tier's algorithm's business: rate, burst, delay and
// nodelay for the buckets, limit and window for the windows.
type Params = spillway.LimitParams

// Build validates p as parameters of alg, by the rules of a tier's own
// (bucket.Spec). Its error is bucket.Spec.Build's *bucket.LimitError,
// naming the field.
func Build(p Params, alg bucket.Algorithm) (bucket.Limit, error) {
	return bucket.Spec{Algorithm: alg.String(), Rate: p.Rate, Burst: p.Burst, Delay: p.Delay, NoDelay: p.NoDelay,
		Limit: p.Limit, Window: p.Window}.Build()
}

// ParamsOf is l's parameters as Params (a leaky bucket's nodelay shown as
// its delay, equal to its burst).
func ParamsOf(l bucket.Limit) Params {
	switch l.Algorithm() {
	case bucket.LeakyBucket:
		return Params{Rate: l.Rate().String(), Burst: l.Burst(), Delay: l.Delay()}
	case bucket.TokenBucket:
		return Params{Rate: l.Rate().String(), Burst: l.Burst()}
	}
	return Params{Limit: l.Count(), Window: l.Window().String()}
}

// Source says where a key's limit comes from.
type Source string

// Sources of a key's limit.
const (
	// SourceDefault: the tier's own limit; no override matches the key.
	SourceDefault Source = "default"
	// SourceConfig: an override of the configuration file.
	SourceConfig Source = "config"
	// SourceRuntime: an override set through the admin API.
	SourceRuntime Source = "runtime"
)

// Override is one override of a tier — the limit its pattern's keys get
// (Params, Limit) — or of a concurrency entry — how many jobs of one of
// its pattern's keys run at once (Max).
type Override struct {
	Pattern Pattern
	Params  Params
	// Limit is Params built with the tier's algorithm.
	Limit bucket.Limit
	// Max, for a concurrency entry's override: 1 to queue.MaxConcurrency.
	Max    int
	Source Source
	// By and At, for a runtime override: the fingerprint of the admin key
	// that set it, and when.
	By string
	At time.Time
	// Line, for a configuration override: its line in the file.
	Line int
}

// BucketSuffix is what the admitter appends to the bucket key of a key
// this override limits: a short fingerprint of the limit's parameters.
// The stores keep a rate bucket's level scaled by its rate's period, so a
// state cannot be read under other parameters: a key whose limit changes
// starts a bucket of its own, and the one it leaves expires as any idle
// key's does. Two overrides with the same parameters share the suffix.
func (o *Override) BucketSuffix() string {
	sum := sha256.Sum256([]byte(o.Limit.String()))
	return "~" + hex.EncodeToString(sum[:4])
}
