//go:build unix && !linux

package cluster_test

import "os/exec"

// setDeathSignal does nothing where there is no parent-death signal; the
// test's cleanups still kill every process it started.
func setDeathSignal(*exec.Cmd) {}
