// Package grpctest serves gRPC services on loopback for tests: the fakes
// of several packages are served the same way, and stopped when the test
// ends.
package grpctest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
)

// Serve serves the services register adds on a free loopback port until
// the test ends and returns the address.
func Serve(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.Serve(lis)
	}()
	// Stop ends Serve at once; waiting for it leaves no goroutine behind.
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	return lis.Addr().String()
}
