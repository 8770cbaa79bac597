//go:build unix

package proc

import (
	"syscall"
	"time"
)

func rusage() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{
		CPU:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		Switches: uint64(ru.Nvcsw + ru.Nivcsw),
	}
}
