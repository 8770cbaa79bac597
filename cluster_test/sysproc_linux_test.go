//go:build linux

package cluster_test

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel SIGKILL the node if the test process dies
// without running its cleanups (a panic or a -timeout), so no ordo process
// outlives the test run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
