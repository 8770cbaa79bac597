// Package freeaddr picks TCP addresses for processes and servers that are
// started later and must be told their address up front: Raft and gRPC
// addresses that a peer has to know before the node runs (server tests,
// cluster_test, cmd/ordo's restore test, the verify harness), and etcd in
// bench's tests, which cannot be told to listen on port 0 and report its
// port.
//
// It binds port 0, notes the port the kernel chose and closes the
// listener. Another process may take the port between the close and the
// bind that follows; that race is acceptable only where losing it fails
// loudly (a server that cannot listen, a process that exits), as it does
// in tests and in the verify harness, never in a served cluster.
package freeaddr

import (
	"fmt"
	"net"
)

// Addrs returns n distinct addresses on ip whose ports were free a moment
// ago. The listeners are held open together until all n are chosen, so
// that no two of the addresses coincide.
func Addrs(ip string, n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs, nil
}

// TB is the part of testing.TB that Loopback needs; an interface of its
// own, so that the verify harness, which is no test, need not link
// package testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Loopback returns n distinct addresses on 127.0.0.1 whose ports were free
// a moment ago, and fails t if it cannot find them.
func Loopback(t TB, n int) []string {
	t.Helper()
	addrs, err := Addrs("127.0.0.1", n)
	if err != nil {
		t.Fatalf("free addresses: %v", err)
	}
	return addrs
}
