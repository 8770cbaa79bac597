// Package proc reads what this process has spent so far: CPU time, read
// and write system calls, and context switches. A benchmark reads it
// before and after a run and divides by the IDs handed out: CPU per ID is
// the figure that holds across hosts, and the calls and switches beside
// it say where the CPU went (a message per call, a wake-up per answer).
package proc

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"time"
)

// Usage is what the process spent from its start. A count this system
// does not keep is 0.
type Usage struct {
	// CPU is user and system time, every thread.
	CPU time.Duration
	// ReadCalls and WriteCalls count read- and write-like system calls
	// (sockets and files alike), from /proc/self/io.
	ReadCalls, WriteCalls uint64
	// Switches counts context switches, voluntary (a thread blocked) and
	// not.
	Switches uint64
}

// Sub is what u spent since before.
func (u Usage) Sub(before Usage) Usage {
	return Usage{
		CPU:        u.CPU - before.CPU,
		ReadCalls:  u.ReadCalls - before.ReadCalls,
		WriteCalls: u.WriteCalls - before.WriteCalls,
		Switches:   u.Switches - before.Switches,
	}
}

// Self is this process's usage so far.
func Self() Usage {
	u := rusage()
	u.ReadCalls, u.WriteCalls = ioCalls()
	return u
}

// ioCalls reads syscr and syscw from /proc/self/io; 0 where the file is
// missing or unreadable (not Linux, no task I/O accounting).
func ioCalls() (reads, writes uint64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	return parseIO(b)
}

// parseIO reads the syscr and syscw lines of a /proc/<pid>/io file.
func parseIO(b []byte) (reads, writes uint64) {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		name, value, ok := bytes.Cut(s.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}
