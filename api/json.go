package api

import (
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonForm is the one JSON form of the API's messages where people and
// scripts read them (MarshalJSON).
var jsonForm = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// MarshalJSON renders m in the one JSON form of Ordo's messages, which
// every JSON view of one shares: HTTP GET /v1/status answers a
// StatusResponse in it, and ordo status --json and ordo sequence ...
// --json print theirs in it, so a script reads one schema whichever it
// asks. It is protobuf's canonical JSON mapping with the proto field
// names (snake_case): every field is present, zero values included; every
// 64-bit integer (uint64, int64) is a string, since a JSON number past
// 2^53 loses its low bits in JavaScript and many JSON tools; 32-bit
// integers and doubles are numbers, booleans true or false, repeated
// fields arrays (empty: []).
func MarshalJSON(m proto.Message) ([]byte, error) { return jsonForm.Marshal(m) }
