// Package api holds Ordo's gRPC API: ordo.proto and the Go code generated
// from it. Regenerate with `go generate ./api` (needs protoc,
// protoc-gen-go and protoc-gen-go-grpc on PATH).
package api

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative ordo.proto
