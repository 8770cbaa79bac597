// Package grpcapi serves an Ordo node's calls. Each call reads top-down
// in one place, from its checks to its answer: where it is served (here,
// or one forward to the leader: Server.forward, the one rule), the
// sequencer, the encoding of IDs (api.Runs), the metrics, and the mapping
// of errors to codes (ToStatus, the one map, which package httpapi's
// handlers meet through Server too). Around the calls: who may call what
// and the cluster-id check of every call (Auth), the bounds on what one
// caller can make a node hold (limits.go), and the peer connections that
// name the cluster (Peers).
//
// It takes the node's parts as the real types, each through an interface
// of the few methods it uses (Parts), and the node itself (*server.Node)
// as Node: its rules stay the node's (why it refuses, who may join or
// lead, how membership changes commit), and reach here as unmapped
// errors. This package does not import package server.
package grpcapi

// maxAnswersPerMessage bounds the answers sent in one NextStream or Echo
// message, so that one message, and what a stream holds, stays bounded
// however many calls a client packs into a request.
const maxAnswersPerMessage = 1024
