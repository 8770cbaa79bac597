package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"
)

// TestBenchStreamFloor: `ordo bench --target stream-floor` measures a
// node's echo stream, calls with no IDs, and refuses the other Ordo
// client modes.
func TestBenchStreamFloor(t *testing.T) {
	n := testNode(t, "n1", t.TempDir(), "127.0.0.1:0")
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	args := []string{"--target", "stream-floor", "--addrs", n.GRPCAddr(), "--duration", "300ms", "--concurrency", "4"}

	out, err := captureStdout(t, func() error { return runBench(append(args, "--json")) })
	if err != nil {
		t.Fatalf("ordo bench --target stream-floor: %v\n%s", err, out)
	}
	var res struct {
		OK       bool   `json:"ok"`
		Target   string `json:"target"`
		Requests int64  `json:"requests"`
		Errors   int64  `json:"errors"`
		IDs      int64  `json:"ids"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("ordo bench --json: %v\n%s", err, out)
	}
	if !res.OK || res.Target != "stream-floor" || res.Requests == 0 || res.Errors != 0 || res.IDs != 0 {
		t.Fatalf("ordo bench --target stream-floor: %+v, want the stream floor's calls, no errors, no IDs", res)
	}

	for _, extra := range [][]string{{"--unary"}, {"--coalesce", "1"}, {"--count", "2"}} {
		if err := runBench(append(args, extra...)); !errors.Is(err, errUsage) {
			t.Errorf("ordo bench --target stream-floor %v: %v, want a usage error", extra, err)
		}
	}
}

// captureStdout runs f with os.Stdout sent to a pipe, and returns what it
// wrote.
func captureStdout(t *testing.T, f func() error) ([]byte, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	stdout := os.Stdout
	os.Stdout = w
	err = f()
	os.Stdout = stdout
	w.Close()
	return <-read, err
}

// TestBenchSeveralTargets: `ordo bench --target a,b` measures each in
// turn and compares the first with the second, in one JSON document.
func TestBenchSeveralTargets(t *testing.T) {
	n := testNode(t, "n1", t.TempDir(), "127.0.0.1:0")
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	out, err := captureStdout(t, func() error {
		return runBench([]string{"--target", "reserve, commit-floor", "--addrs", n.GRPCAddr(), "--duration", "300ms", "--concurrency", "4", "--json"})
	})
	if err != nil {
		t.Fatalf("ordo bench --target reserve,commit-floor: %v\n%s", err, out)
	}
	var res struct {
		OK   bool `json:"ok"`
		Runs []struct {
			OK       bool   `json:"ok"`
			Target   string `json:"target"`
			Requests int64  `json:"requests"`
			IDs      int64  `json:"ids"`
		} `json:"runs"`
		Ratios []struct {
			Of, Over string
			Requests float64
		} `json:"ratios"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("ordo bench --json: %v\n%s", err, out)
	}
	if !res.OK || len(res.Runs) != 2 || res.Runs[0].Target != "reserve" || res.Runs[1].Target != "commit-floor" ||
		res.Runs[0].IDs != res.Runs[0].Requests || res.Runs[1].Requests == 0 || res.Runs[1].IDs != 0 {
		t.Fatalf("ordo bench --target reserve,commit-floor: %s\nwant a reserve run with one ID a call, then a commit floor run with none", out)
	}
	if len(res.Ratios) != 1 || res.Ratios[0].Of != "reserve" || res.Ratios[0].Over != "commit-floor" || res.Ratios[0].Requests <= 0 {
		t.Fatalf("ratios %+v, want reserve over commit-floor", res.Ratios)
	}
	if err := runBench([]string{"--target", " , ", "--addrs", n.GRPCAddr()}); !errors.Is(err, errUsage) {
		t.Fatalf("ordo bench with no target: %v, want a usage error", err)
	}
}

func TestMountOf(t *testing.T) {
	mounts := `/dev/vda / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
/dev/vdb1 /var/lib/ordo xfs rw 0 0
/dev/vdc /var/lib/ordo xfs rw 0 0
`
	for dir, want := range map[string]string{
		"/var/lib/ordo/n1":   "/dev/vdc xfs /var/lib/ordo", // the later mount hides the earlier
		"/var/lib/ordo-old":  "/dev/vda ext4 /",
		"/tmp/ordo-bench-1":  "tmpfs tmpfs /tmp",
		"/tmpdir/ordo-bench": "/dev/vda ext4 /",
	} {
		dev, fs, at := mountOf(mounts, dir)
		if got := dev + " " + fs + " " + at; got != want {
			t.Errorf("mountOf(%s) = %s, want %s", dir, got, want)
		}
	}
	if dev, _, _ := mountOf("", "/x"); dev != "" {
		t.Errorf("mountOf with no mounts = %q", dev)
	}
}

// TestBenchReportsWhatEachProcessSpent: a run prints its own CPU per ID
// and each node's, the leader's with its stream batching and rounds.
func TestBenchReportsWhatEachProcessSpent(t *testing.T) {
	n := testNode(t, "n1", t.TempDir(), "127.0.0.1:0")
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	out, err := captureStdout(t, func() error {
		return runBench([]string{"--addrs", n.GRPCAddr(), "--duration", "300ms", "--concurrency", "8", "--json"})
	})
	if err != nil {
		t.Fatalf("ordo bench: %v\n%s", err, out)
	}
	var res struct {
		IDs   int64 `json:"ids"`
		Costs []struct {
			Name              string  `json:"name"`
			Role              string  `json:"role"`
			CPUPerID          float64 `json:"cpu_per_id_us"`
			CallsPerMessage   float64 `json:"calls_per_message"`
			AnswersPerMessage float64 `json:"answers_per_message"`
			RoundsPerSecond   float64 `json:"rounds_per_second"`
		} `json:"costs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("ordo bench --json: %v\n%s", err, out)
	}
	if res.IDs == 0 || len(res.Costs) != 2 || res.Costs[0].Name != "bench" || res.Costs[1].Name != "n1" || res.Costs[1].Role != "leader" {
		t.Fatalf("ordo bench costs: %s\nwant the bench's, then the leader n1's", out)
	}
	// The node runs in this process, so both read the same CPU clock: only
	// that each moved can be checked here, not how they compare.
	if l := res.Costs[1]; res.Costs[0].CPUPerID <= 0 || l.CPUPerID <= 0 || l.CallsPerMessage < 1 || l.AnswersPerMessage < 1 || l.RoundsPerSecond <= 0 {
		t.Fatalf("ordo bench costs %+v: want CPU per ID, at least one call per message read and one answer per message sent, and rounds", res.Costs)
	}
}
