// Package grpcapi owns the parts of an Ordo node's gRPC surface that need
// of the node only a small interface: the Sequencer service (Next,
// NextStream and its relay to the leader, Layout) over SequencerNode; the
// Peer service (Term rounds) over PeerNode; who may call what and the
// cluster-id check of every call (Auth) over Node; the Floor echo service;
// the server options that bound what one caller can make a node hold
// (message sizes, streams per connection, handshake time, keepalives); and
// the interceptor that bounds every unary call's deadline.
//
// It does not own the Admin service (still server/grpc.go), the rule of
// when a call is forwarded and the connections to peers (the node's,
// shared with Admin), nor the mapping of errors to gRPC codes: that stays
// in package server's toStatus, the one map, reached here through
// Node.ToStatus. Package server builds the grpc.Server, registers every
// service and installs the interceptors in their order. This package does
// not import package server.
package grpcapi

// MaxAnswersPerMessage bounds the answers sent in one NextStream or Echo
// message, so that one message, and what a stream holds, stays bounded
// however many calls a client packs into a request.
const MaxAnswersPerMessage = 1024
