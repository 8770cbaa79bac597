package server

// maxRaftConnsPerHost bounds the Raft connections from one host: each
// peer pools a few, and a test cluster puts five nodes on one. The gRPC
// server's limits, and the admin fields' bounds, are package grpcapi's;
// the per-host bound on every listener is package hostlimit's.
const maxRaftConnsPerHost = 128
