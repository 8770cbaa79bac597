package api

// Flow-control windows every Ordo connection uses, on both ends: fixed,
// which turns off grpc-go's bandwidth-delay estimator. The estimator pings
// the peer as data arrives and adjusts the window from the round trip it
// measures; on a busy stream of small messages that is a ping and its ack
// for about every message each way, and on a host where a system call is
// dear (a virtual machine: a loopback write costs tens of microseconds)
// those calls were a fifth of the leader's CPU per ID (issue 27). A fixed
// window of a message's largest size keeps a stream from waiting on
// window updates; the connection's holds several such streams.
const (
	// StreamWindow is each stream's window: the largest message (1 MiB).
	StreamWindow = 1 << 20
	// ConnWindow is each connection's window.
	ConnWindow = 8 << 20
)
