package main

import (
	"errors"
	"strings"
	"testing"
)

// TestServeHTTPAddrOnlyOnLoopback: --http-addr is held to loopback without
// TLS, like the other ports, and refused before anything starts.
func TestServeHTTPAddrOnlyOnLoopback(t *testing.T) {
	err := runServe([]string{"--id", "n1", "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "0.0.0.0:0"})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "0.0.0.0:0") {
		t.Fatalf("--http-addr 0.0.0.0:0 without TLS: %v, want a usage error naming it", err)
	}
}
