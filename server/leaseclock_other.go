//go:build !linux

package server

import "time"

// leaseClock is Go's monotonic clock where CLOCK_BOOTTIME is missing; on
// some systems it stops while the machine is suspended, which
// docs/design.md lists among the lease's assumptions.
func leaseClock() time.Duration { return time.Since(leaseClockStart) }
