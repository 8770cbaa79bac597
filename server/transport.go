package server

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is Raft's TCP stream layer. Unlike raft's own, it dials
// peers from the IP it listens on, so on a host with several addresses a
// peer (or a firewall, or the fault-injecting proxy of the tests) sees
// connections come from the node's own address.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
}

// newStreamLayer listens on bind and advertises advertise (bind's actual
// address when empty).
func newStreamLayer(bind, advertise string) (*streamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen for raft: %w", err)
	}
	l := &streamLayer{Listener: lis, advertise: lis.Addr()}
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil || a.IP == nil || a.IP.IsUnspecified() || a.Port == 0 {
			lis.Close()
			return nil, fmt.Errorf("%w: raft advertise address %q must be a reachable ip:port", ErrBadConfig, advertise)
		}
		l.advertise = a
	}
	if ip := lis.Addr().(*net.TCPAddr).IP; ip.IsUnspecified() {
		if advertise == "" {
			lis.Close()
			return nil, fmt.Errorf("%w: raft address %q binds every interface; give an advertise address peers can reach", ErrBadConfig, bind)
		}
	} else {
		l.dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return l, nil
}

// Dial implements raft.StreamLayer.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := l.dialer
	d.Timeout = timeout
	return d.Dial("tcp", string(address))
}

// Addr implements net.Listener: the address peers should dial.
func (l *streamLayer) Addr() net.Addr { return l.advertise }
