// Package grpcapi owns the parts of an Ordo node's gRPC surface that need
// nothing of the node but what they are handed: the Floor echo service,
// the server options that bound what one caller can make a node hold
// (message sizes, streams per connection, handshake time, keepalives), and
// the interceptor that bounds every unary call's deadline.
//
// It does not own the Sequencer, Admin and Peer services, authorization,
// the cluster-id check, or the mapping of errors to gRPC codes: those are
// still in package server (server/grpc.go, authz.go, errors.go), which
// builds the grpc.Server, registers every service and installs the
// interceptors in their order. It does not import package server.
package grpcapi

// MaxAnswersPerMessage bounds the answers sent in one NextStream or Echo
// message, so that one message, and what a stream holds, stays bounded
// however many calls a client packs into a request.
const MaxAnswersPerMessage = 1024
