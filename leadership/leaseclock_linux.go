package leadership

import (
	"time"

	"golang.org/x/sys/unix"
)

// LeaseClock is the clock promises and leases run on, the voters' and the
// leader's alike. It reads CLOCK_BOOTTIME: monotonic, and counting the
// time the machine was suspended, which CLOCK_MONOTONIC (Go's monotonic
// clock on Linux) does not. A promise must run out by the time that
// really passed.
func LeaseClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Not on any Linux since 2.6.39; Go's monotonic clock is the
		// next best.
		return time.Since(leaseClockStart)
	}
	return time.Duration(ts.Nano())
}
