// Package api holds Ordo's gRPC API: ordo.proto, the Go code generated
// from it, and the checked decoder of its ID runs (ExpandRuns,
// RunReader), kept with the wire type so that every reader of an answer
// checks it the same way. Regenerate with `go generate ./api` (needs
// protoc, protoc-gen-go and protoc-gen-go-grpc on PATH).
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative ordo.proto
