package api

// LeaderAddrKey is the response trailer in which a node names the
// leader's gRPC address whenever it knows it, so clients can go there.
const LeaderAddrKey = "ordo-leader-addr"

// IDs expands the runs of a response into IDs, in order. It trusts the
// server; the Go client checks what it expands.
func (x *NextResponse) IDs() []uint64 {
	var ids []uint64
	for _, r := range x.GetRuns() {
		for i := range uint64(r.Count) {
			ids = append(ids, r.First+i*r.Step)
		}
	}
	return ids
}
