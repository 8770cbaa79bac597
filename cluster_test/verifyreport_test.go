//go:build unix

package cluster_test

import (
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/verify"
)

// nodeLogTail is how many lines of each node's log a failed verify test
// shows.
const nodeLogTail = 40

// explainVerifyFailure, deferred by a test that judges a whole verify
// run, makes a failure readable from the test's output alone, as on a CI
// machine nobody can look at again: res's report (its findings name the
// check that failed, a few calls with their errors and the fault they
// happened during) and the end of each node log in dir, unless the
// report carries them already. res is nil when the run was the CLI's, whose
// output the test prints itself.
func explainVerifyFailure(t *testing.T, res *verify.Result, dir string) {
	t.Helper()
	if !t.Failed() {
		return
	}
	var b strings.Builder
	if res != nil && len(res.Findings) > 0 {
		b.WriteString("what the verify run found wrong:\n")
		for _, f := range res.Findings {
			b.WriteString("  " + f.Check + ": " + f.Detail + "\n")
			if f.When != "" {
				b.WriteString("    when: " + f.When + "\n")
			}
			for _, c := range f.Calls {
				b.WriteString("    call: " + c.String() + "\n")
			}
		}
	}
	if res != nil && len(res.Logs) > 0 {
		b.WriteString("the ends of the node logs are in the report above\n")
	} else {
		for _, l := range verify.TailLogs(verify.LogFiles(dir), nodeLogTail) {
			b.WriteString(l.String())
		}
	}
	t.Log(b.String())
}
