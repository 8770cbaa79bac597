package server

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

func TestCheckNodeID(t *testing.T) {
	for id, ok := range map[string]bool{
		"n1": true, "node-1.eu_west": true, strings.Repeat("a", maxIDLength): true,
		"": false, "-n1": false, "n 1": false, "n1\n": false, "n/1": false, "ü": false,
		strings.Repeat("a", maxIDLength+1): false,
	} {
		if err := checkNodeID(id); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("checkNodeID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestCheckDialAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7001": true, "node1.example:7001": true, "[::1]:7001": true,
		"127.0.0.1": false, ":7001": false, "0.0.0.0:7001": false, "[::]:7001": false,
		"127.0.0.1:0": false, "127.0.0.1:70000": false, "127.0.0.1:http": false,
		strings.Repeat("a", maxAddrLength) + ":1": false,
	} {
		if err := checkDialAddr(addr); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("checkDialAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

// TestHostLimit: a host past its limit is turned away; a slot given back
// takes a new connection.
func TestHostLimit(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := limitPerHost(raw, 2, hclog.NewNullLogger())
	defer lis.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	mustAccept := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("connection not accepted within 5 s")
			return nil
		}
	}
	dial()
	first := mustAccept()
	dial()
	mustAccept()
	third := dial() // over the limit: closed by the listener
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("third connection: read %v, want it closed", err)
	}
	select {
	case c := <-accepted:
		t.Fatalf("third connection accepted: %v", c.RemoteAddr())
	default:
	}
	first.Close()
	dial()
	mustAccept()
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestBoundUnary: a call without a deadline, or with a longer one, gets
// the bound; a shorter deadline is kept.
func TestBoundUnary(t *testing.T) {
	bound := boundUnary(50 * time.Millisecond)
	left := func(ctx context.Context) time.Duration {
		var got time.Duration
		_, _ = bound(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			d, ok := ctx.Deadline()
			if !ok {
				got = -1
				return nil, nil
			}
			got = time.Until(d)
			return nil, nil
		})
		return got
	}
	if d := left(context.Background()); d < 0 || d > 50*time.Millisecond {
		t.Errorf("no deadline: handler saw %v left, want at most 50ms", d)
	}
	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if d := left(long); d < 0 || d > 50*time.Millisecond {
		t.Errorf("an hour: handler saw %v left, want at most 50ms", d)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if d := left(short); d < 0 || d > 10*time.Millisecond {
		t.Errorf("10ms: handler saw %v left, want at most 10ms", d)
	}
}

// TestMessageSizeBound: a request larger than the bound is refused before
// any handler sees it, and the node serves on.
func TestMessageSizeBound(t *testing.T) {
	n := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	conn := mustConn(t, n.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := api.NewAdminClient(conn).Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: strings.Repeat("x", maxMessageBytes)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("join of %d bytes: %v, want ResourceExhausted", maxMessageBytes, err)
	}
	mustNext(t, n.GRPCAddr(), 1)
}

// TestAdminFieldsValidated: bad ids and addresses are InvalidArgument.
func TestAdminFieldsValidated(t *testing.T) {
	n := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, n.GRPCAddr(), 1)
	admin := api.NewAdminClient(mustConn(t, n.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"join with a bad id": func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n 2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
			return err
		},
		"join at a wildcard": func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "0.0.0.0:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
			return err
		},
		"join at port 0": func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:0", Layout: "default"})
			return err
		},
		"remove a bad id": func() error {
			_, err := admin.Remove(ctx, &api.RemoveRequest{Id: "../n1"})
			return err
		},
		"transfer to a bad id": func() error {
			_, err := admin.TransferLeader(ctx, &api.TransferLeaderRequest{Id: strings.Repeat("n", 100)})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}
