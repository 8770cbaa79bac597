// Package grpctest serves gRPC services on loopback for tests, and dials
// them: the fakes of several packages are served the same way, and
// servers and connections are closed when the test ends.
package grpctest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// Dial opens a plain (no TLS) connection to addr, closed when the test
// ends, for calls a test makes without the client's retries.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
