package verify

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills a node if the verifying process dies, so no node
// outlives a crashed or interrupted run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
