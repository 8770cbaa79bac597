//go:build !linux

package leadership

import "time"

// LeaseClock is the clock promises and leases run on: Go's monotonic
// clock where CLOCK_BOOTTIME is missing; on
// some systems it stops while the machine is suspended, which
// docs/design.md lists among the lease's assumptions.
func LeaseClock() time.Duration { return time.Since(leaseClockStart) }
