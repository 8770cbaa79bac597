package server

import (
	"fmt"
	"net"
	"strconv"
)

// Limits of this package: the Raft connections a host may hold, and the
// admin fields the Admin service accepts. The gRPC server's own limits
// are package grpcapi's ServerOptions and BoundUnary; the per-host bound
// on every listener is package hostlimit's.
const (
	// maxRaftConnsPerHost bounds the Raft connections from one host:
	// each peer pools a few, and a test cluster puts five nodes on one.
	maxRaftConnsPerHost = 128
	// maxIDLength and maxAddrLength bound admin fields.
	maxIDLength   = 64
	maxAddrLength = 255
)

// checkNodeID refuses ids that could not be a flag value, a file name or a
// log field without quoting: letters, digits, '.', '_' and '-', not
// starting with '-', at most maxIDLength bytes.
func checkNodeID(id string) error {
	if id == "" || len(id) > maxIDLength || id[0] == '-' {
		return fmt.Errorf("%w: node id %q: want 1 to %d characters, not starting with '-'", ErrBadRequest, id, maxIDLength)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: node id %q: only letters, digits, '.', '_' and '-' are allowed", ErrBadRequest, id)
		}
	}
	return nil
}

// checkDialAddr refuses an address other nodes could not dial: it must be
// host:port with a host that is not a wildcard and a port from 1 to 65535.
func checkDialAddr(addr string) error {
	if len(addr) > maxAddrLength {
		return fmt.Errorf("%w: address of %d bytes, at most %d", ErrBadRequest, len(addr), maxAddrLength)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: address %q: %v", ErrBadRequest, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: address %q: port must be 1 to 65535", ErrBadRequest, addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: address %q: a wildcard host cannot be dialed", ErrBadRequest, addr)
	}
	return nil
}
