// Package grpcapi is an Ordo node's gRPC surface: the Sequencer service
// (Next, NextStream and its relay to the leader, Layout), the Admin
// service (status, membership, leadership transfer, backup), the Peer
// service (Term rounds) and the Floor echo service; who may call what and
// the cluster-id check of every call (Auth); the server options that
// bound what one caller can make a node hold, the interceptor that bounds
// every unary call's deadline, and the checks of admin fields.
//
// It declares what it needs of a node as small interfaces (Node,
// SequencerNode, AdminNode, PeerNode), as package httpapi does, so a fake
// is a few methods. It owns how calls travel between nodes: the forwarded
// mark and ForwardContext, the peer connections that name the cluster
// (Peers). It does not own the node's state or rules: whether a call is
// forwarded (the node's Forward), who may join, register, leave or lead
// and how those changes commit, and the sequencer stay the node's,
// reached through those interfaces; the services check a request's
// fields and serve it where Forward says. Nor
// does it map errors to gRPC codes: that stays in package server's
// toStatus, the one map, reached through Node.ToStatus. Package server
// builds the grpc.Server, registers every service and installs the
// interceptors in their order. This package does not import package
// server.
package grpcapi

// maxAnswersPerMessage bounds the answers sent in one NextStream or Echo
// message, so that one message, and what a stream holds, stays bounded
// however many calls a client packs into a request.
const maxAnswersPerMessage = 1024
