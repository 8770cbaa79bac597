package server

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/startup"
)

func TestStreamLayerDialsFromItsOwnIP(t *testing.T) {
	target, err := newStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	l, err := newStreamLayer("127.0.0.2:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := target.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		// Answers the handshake, then waits for the dialer to close.
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}()
	c, err := l.Dial(raft.ServerAddress("127.0.0.1:"+portOf(t, target.Addr())), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case a := <-accepted:
		if a == nil {
			t.Fatal("the target accepted no connection")
		}
		if ip := a.(*net.TCPAddr).IP.String(); ip != "127.0.0.2" {
			t.Fatalf("connection came from %s, want 127.0.0.2", ip)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted within 5 s")
	}
	if got := l.Addr().String(); got != l.Listener.Addr().String() {
		t.Fatalf("advertises %s, want the bound %s", got, l.Listener.Addr())
	}
}

func TestStreamLayerAdvertise(t *testing.T) {
	// An address is advertised as given, and a name stays a name, so that
	// peers follow it to a new IP.
	for _, advertise := range []string{"127.0.0.1:9", "localhost:9"} {
		l, err := newStreamLayer("127.0.0.1:0", advertise)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if got := l.Addr().String(); got != advertise {
			t.Fatalf("advertises %s, want %s", got, advertise)
		}
	}
	for _, tt := range []struct{ bind, advertise string }{
		{"0.0.0.0:0", ""},            // every interface: peers need an address
		{"127.0.0.1:0", "0.0.0.0:9"}, // unspecified advertise
		{"127.0.0.1:0", "127.0.0.1:0"},
		{"127.0.0.1:0", "no-port"},
	} {
		if l, err := newStreamLayer(tt.bind, tt.advertise); !errors.Is(err, startup.ErrBadConfig) {
			if l != nil {
				l.Close()
			}
			t.Errorf("bind %q advertise %q: err %v, want startup.ErrBadConfig", tt.bind, tt.advertise, err)
		}
	}
}

func portOf(t *testing.T, a net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}
