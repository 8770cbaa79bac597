package main

import (
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/seed-e8569b35/ordo/api"
)

// Bounds of ordo status --limit: the server's (grpcapi.DefaultSequenceLimit
// and MaxSequenceLimit).
const (
	defaultStatusLimit = 50
	maxStatusLimit     = 10_000
)

// statusSequenceFlags are ordo status's flags for the named sequences.
type statusSequenceFlags struct {
	sequences *bool
	limit     *int
}

func addStatusSequenceFlags(fs *flag.FlagSet) statusSequenceFlags {
	return statusSequenceFlags{
		sequences: fs.Bool("sequences", false, "also list the named sequences: kind, group, next mark, and the IDs a second the leader handed out of each over the last 10 s, busiest first"),
		limit:     fs.Int("limit", defaultStatusLimit, fmt.Sprintf("with --sequences: list at most this many (1 to %d); a line says how many more there are", maxStatusLimit)),
	}
}

// request is the Status request the flags ask for; a usage error for a
// --limit out of range or without --sequences.
func (f statusSequenceFlags) request(fs *flag.FlagSet) (*api.StatusRequest, error) {
	limitSet := false
	fs.Visit(func(fl *flag.Flag) { limitSet = limitSet || fl.Name == "limit" })
	switch {
	case limitSet && !*f.sequences:
		return nil, fmt.Errorf("%w: --limit is for the named sequences: ordo status --sequences --limit %d", errUsage, *f.limit)
	case *f.limit < 1 || *f.limit > maxStatusLimit:
		return nil, fmt.Errorf("%w: --limit %d: want 1 to %d", errUsage, *f.limit, maxStatusLimit)
	}
	return &api.StatusRequest{Sequences: *f.sequences, SequenceLimit: uint32(*f.limit)}, nil
}

// printStatusSequences prints the named sequences of a status, after its
// nodes: a table, how many more there are, and whose rates they are.
func printStatusSequences(resp *api.StatusResponse) error {
	fmt.Println()
	if len(resp.Sequences) == 0 && resp.MoreSequences == 0 {
		fmt.Println("no named sequences: create one with ordo sequence create NAME --kind dense")
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEQUENCE\tKIND\tGROUP\tNEXT\tIDS/S\tISSUED")
	for _, s := range resp.Sequences {
		rate, issued := "-", "-"
		if resp.RatesFrom != "" {
			rate, issued = fmt.Sprintf("%.1f", s.Rate), fmt.Sprint(s.Issued)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, s.Kind, s.Group, s.Next, rate, issued)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if resp.MoreSequences > 0 {
		fmt.Printf("... and %d more named sequences: raise --limit to list them\n", resp.MoreSequences)
	}
	if resp.RatesFrom == "" {
		fmt.Println("no rates: no leader answered (the sequences are by name, from the state of the node that did)")
		return nil
	}
	window := time.Duration(resp.RateWindowMs) * time.Millisecond
	fmt.Printf("IDS/S: IDs a second over the last %s, busiest first; ISSUED: IDs since the leader (%s) started; both as it counts them\n", window, resp.RatesFrom)
	return nil
}
