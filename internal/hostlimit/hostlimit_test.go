package hostlimit

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestHostLimit: a host past its limit is turned away; a slot given back
// takes a new connection.
func TestHostLimit(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := Wrap(raw, 2, hclog.NewNullLogger())
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

// TestNoLimit: max 0 leaves the listener as it is.
func TestNoLimit(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if got := Wrap(raw, 0, hclog.NewNullLogger()); got != raw {
		t.Fatalf("Wrap(l, 0) = %T, want l itself", got)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
