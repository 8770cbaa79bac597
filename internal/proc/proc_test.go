package proc

import (
	"os"
	"testing"
	"time"
)

func TestParseIOReadsTheCallCounts(t *testing.T) {
	b := []byte("rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 3\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n")
	if r, w := parseIO(b); r != 10 || w != 3 {
		t.Fatalf("parseIO = %d, %d; want 10, 3", r, w)
	}
	if r, w := parseIO([]byte("syscr: x\nnonsense\n")); r != 0 || w != 0 {
		t.Fatalf("parseIO of a bad file = %d, %d; want 0, 0", r, w)
	}
}

func TestSelfCountsWhatThisProcessSpends(t *testing.T) {
	before := Self()
	// Spin until the CPU clock moves (its tick may be coarse), and write:
	// both counts must grow, and never go back.
	f, err := os.Create(t.TempDir() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if Self().CPU != before.CPU || time.Now().After(deadline) {
			break
		}
	}
	d := Self().Sub(before)
	if d.CPU <= 0 {
		t.Fatalf("CPU did not grow in 10 s of spinning: %+v", d)
	}
	if _, err := os.Stat("/proc/self/io"); err == nil && d.WriteCalls == 0 {
		t.Fatalf("writes were made but not counted: %+v", d)
	}
}
