package api

import "google.golang.org/grpc"

// Flow-control windows every Ordo connection uses, on both ends: fixed,
// which turns off grpc-go's bandwidth-delay estimator. The estimator pings
// the peer as data arrives and adjusts the window from the round trip it
// measures; on a busy stream of small messages that is a ping and its ack
// for about every message each way, and on a host where a system call is
// dear (a virtual machine: a loopback write costs tens of microseconds)
// those calls were a fifth of the leader's CPU per ID (issue 27). Each
// stream's window bounds what a node holds of a stream it is not reading
// (1024 streams a connection at most); a larger message still goes, as
// the reader frees the window.
const (
	// StreamWindow is each stream's window: a batch of 1024 calls is
	// about 10 KB, of the longest sequence names about 72 KB.
	StreamWindow = 256 << 10
	// ConnWindow is each connection's window.
	ConnWindow = 8 << 20
)

// DialWindows are the dial options that give a connection these windows:
// every dialer of Ordo nodes (the client, nodes' peers, the bench's
// floor) uses them, as every node's server does (grpcapi.ServerOptions).
func DialWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow)}
}
