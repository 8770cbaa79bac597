package grpcapi

// Named sequences in Admin/Status (StatusRequest.sequences): each live
// one's definition and mark from this node's state, and its rate from
// the leader's counts (Meter.SequenceRate), busiest first, bounded.

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/seed-e8569b35/ordo/api"
)

// DefaultSequenceLimit is how many named sequences Status reports when
// the request names no limit, and MaxSequenceLimit the most it reports.
const (
	DefaultSequenceLimit = 50
	MaxSequenceLimit     = 10_000
)

// checkStatusRequest refuses a limit past MaxSequenceLimit.
func checkStatusRequest(req *api.StatusRequest) error {
	if req.SequenceLimit > MaxSequenceLimit {
		return fmt.Errorf("%w: sequence limit %d: at most %d (ordo status --sequences --limit N)", ErrBadRequest, req.SequenceLimit, MaxSequenceLimit)
	}
	return nil
}

// addSequences puts the live named sequences in resp: by rate, highest
// first, then by name, at most limit of them (0: DefaultSequenceLimit),
// and how many more there are. Rates are this node's counts, so only a
// leader reports them (RatesFrom names it); a node that does not lead
// reports every rate as 0, and the sequences by name.
func (s *Server) addSequences(resp *api.StatusResponse, limit uint32) {
	if limit == 0 {
		limit = DefaultSequenceLimit
	}
	leads := s.Node.Leads()
	var list []*api.SequenceStatus
	for name, seq := range s.State.Sequences() {
		if seq.Dropped {
			continue
		}
		st := &api.SequenceStatus{Name: name, Kind: seq.Kind, Group: seq.Group, Next: seq.Next}
		if leads {
			st.Issued, st.Rate = s.Meter.SequenceRate(name)
		}
		list = append(list, st)
	}
	slices.SortFunc(list, func(a, b *api.SequenceStatus) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(list) > int(limit) {
		resp.MoreSequences = uint64(len(list) - int(limit))
		list = list[:limit]
	}
	resp.Sequences = list
	if leads {
		resp.RatesFrom = s.cfg.ID
	}
	resp.RateWindowMs = uint32(s.Meter.RateWindow().Milliseconds())
}
