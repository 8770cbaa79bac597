package grpcapi

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckNodeID(t *testing.T) {
	for id, ok := range map[string]bool{
		"n1": true, "node-1.eu_west": true, strings.Repeat("a", maxIDLength): true,
		"": false, "-n1": false, "n 1": false, "n1\n": false, "n/1": false, "ü": false,
		strings.Repeat("a", maxIDLength+1): false,
	} {
		if err := CheckNodeID(id); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("CheckNodeID(%q) = %v, want ok=%v", id, err, ok)
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
		if err := CheckDialAddr(addr); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("CheckDialAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}
