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
	err = runBench(append(args, "--json"))
	os.Stdout = stdout
	w.Close()
	out := <-read
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
