// Package grpcapi owns the parts of an Ordo node's gRPC surface that need
// of the node only a small interface: who may call what and the cluster-id
// check of every call (Auth, over the Node interface), the Floor echo
// service, the server options that bound what one caller can make a node
// hold (message sizes, streams per connection, handshake time,
// keepalives), and the interceptor that bounds every unary call's
// deadline.
//
// It does not own the Sequencer, Admin and Peer services (still
// server/grpc.go), nor the mapping of errors to gRPC codes: that stays in
// package server's toStatus, the one map, which Auth reaches through
// Node.ToStatus. Package server builds the grpc.Server, registers every
// service and installs the interceptors in their order. This package does
// not import package server.
package grpcapi

// MaxAnswersPerMessage bounds the answers sent in one NextStream or Echo
// message, so that one message, and what a stream holds, stays bounded
// however many calls a client packs into a request.
const MaxAnswersPerMessage = 1024
