package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestPprofServesOnlyLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", ":0", "example.com:0", "no-port"} {
		if _, stop, err := servePprof(addr, hclog.NewNullLogger()); err == nil {
			stop()
			t.Errorf("--pprof-addr %q was served, want a usage error", addr)
		} else if !errors.Is(err, errUsage) {
			t.Errorf("--pprof-addr %q: %v, want a usage error", addr, err)
		}
	}
}

func TestPprofServesProfiles(t *testing.T) {
	addr, stop, err := servePprof("127.0.0.1:0", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("GET goroutine profile: %s\n%.200s", resp.Status, body)
	}
}
