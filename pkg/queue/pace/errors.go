package pace

import "time"

// aheadError is a KVPacer booking refused because more than pacerAhead
// bookings are outstanding: Reserve waits for wait, then books again.
type aheadError struct{ wait time.Duration }

func (e *aheadError) Error() string { return "pace: too many bookings ahead" }
