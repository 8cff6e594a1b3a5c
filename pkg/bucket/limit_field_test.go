package bucket_test

import (
	"errors"
	"testing"

	"github.com/spillway-dev/spillway/pkg/bucket"
)

// A configuration loader points at the field Build refuses: the stray
// field itself, and for a field that is left out, Want says what it
// should hold.
func TestSpecErrorsPointAtTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec        bucket.Spec
		field, want string
	}{
		{bucket.Spec{Algorithm: "fixed_window", Burst: 2, Limit: 1, Window: "1s"}, "burst", ""},
		{bucket.Spec{Algorithm: "sliding_log", Delay: 1, Limit: 1, Window: "1s"}, "delay", ""},
		{bucket.Spec{Algorithm: "sliding_log", NoDelay: true, Limit: 1, Window: "1s"}, "nodelay", ""},
		{bucket.Spec{Rate: "1/s", Limit: 5}, "limit", ""},
		{bucket.Spec{}, "rate", `a rate such as "10/s"`},
		{bucket.Spec{Algorithm: "token_bucket", Rate: "1/s"}, "burst", "the token bucket's capacity, an integer ≥ 1"},
		{bucket.Spec{Algorithm: "fixed_window", Limit: 5}, "window", `a Go duration such as "1s" or "5m"`},
	} {
		_, err := c.spec.Build()
		var le *bucket.LimitError
		if !errors.As(err, &le) || le.Field != c.field || le.Want != c.want {
			t.Errorf("%+v: %#v, want field %s, Want %q", c.spec, le, c.field, c.want)
		}
	}
}
