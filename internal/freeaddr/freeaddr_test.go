package freeaddr

import (
	"net"
	"testing"
)

// TestLoopbackIsDistinctAndBindable: the addresses differ, and each can
// be bound at once, which is what every caller does next.
func TestLoopbackIsDistinctAndBindable(t *testing.T) {
	addrs := Loopback(t, 5)
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s handed out twice in %v", a, addrs)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("bind %s: %v", a, err)
		}
		l.Close()
	}
}
