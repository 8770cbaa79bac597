package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/layout"
)

// sequenceCommands are the subcommands of ordo sequence.
var sequenceCommands = map[string]func([]string) error{
	"create":   runSequenceCreate,
	"list":     runSequenceList,
	"describe": runSequenceDescribe,
	"drop":     runSequenceDrop,
}

const sequenceUsage = `Usage: ordo sequence <subcommand> [flags]

Subcommands:
  create NAME --kind dense|LAYOUT [--group G [--distinct-group]] [--start S]
                                                            create a named sequence (admin)
  list                                                      list the named sequences
  describe NAME                                             show one named sequence
  drop NAME                                                 drop a named sequence (admin)

Take IDs from one with: ordo next --sequence NAME --count N
Run 'ordo sequence <subcommand> -h' for its flags.
`

// kindWant says what --kind takes, for the errors that name the fix.
const kindWant = "dense (1, 2, 3, ... from --start) or a layout as --layout takes it (default, twitter, discord, instagram, sonyflake, uuidv7, ulid, custom:...)"

func runSequence(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: give a subcommand: ordo sequence create|list|describe|drop (ordo sequence -h for more)", errUsage)
	}
	run, ok := sequenceCommands[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Print(sequenceUsage)
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: unknown subcommand %q: want create, list, describe or drop", errUsage, args[0])
	}
	return run(args[1:])
}

func runSequenceCreate(args []string) error {
	fs := flag.NewFlagSet("sequence create", flag.ContinueOnError)
	cf := addClientFlags(fs)
	kind := fs.String("kind", "", "the sequence's kind (required): "+kindWant)
	group := fs.Uint64("group", 0, "a layout sequence's group (two sequences of one layout and group hand out equal values); not for dense")
	distinct := fs.Bool("distinct-group", false, "refuse a --group that another live sequence of the same layout, or the cluster's default sequence, already has; not for dense")
	start := fs.Uint64("start", 0, "a dense sequence's first value (0: 1); not for a layout")
	name, err := parseName(fs, args)
	if err != nil {
		return err
	}
	if err := checkKind(*kind, *group, *start, *distinct); err != nil {
		return err
	}
	var opts []client.SequenceOption
	if *distinct {
		opts = append(opts, client.DistinctGroup())
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		info, err := c.CreateSequence(ctx, name, *kind, *group, *start, opts...)
		if err != nil {
			return err
		}
		return report(cf, "created sequence "+info.Name+": "+summary(info))
	})
}

// checkKind refuses, before anything is asked, a kind the cluster would
// refuse and a flag that does not go with it.
func checkKind(kind string, group, start uint64, distinct bool) error {
	switch kind {
	case "":
		return fmt.Errorf("%w: --kind is required: %s", errUsage, kindWant)
	case client.DenseKind:
		if group != 0 {
			return fmt.Errorf("%w: --group %d: a dense sequence has no group; --group is for layout sequences", errUsage, group)
		}
		if distinct {
			return fmt.Errorf("%w: --distinct-group: a dense sequence has no group; --distinct-group is for layout sequences", errUsage)
		}
		return nil
	}
	l, err := layout.Parse(kind)
	if err != nil {
		return fmt.Errorf("%w: --kind %q: %v: want %s", errUsage, kind, err, kindWant)
	}
	if start != 0 {
		return fmt.Errorf("%w: --start %d: a sequence of layout %s follows the clock; --start is for dense sequences", errUsage, start, l)
	}
	if err := l.CheckGroup(group); err != nil {
		return fmt.Errorf("%w: --group: %v", errUsage, err)
	}
	return nil
}

// summary is a sequence's kind in a few words: "dense from 1", "twitter
// group 3".
func summary(info *api.SequenceInfo) string {
	if info.Kind == client.DenseKind {
		return fmt.Sprintf("dense from %d", max(info.Start, 1))
	}
	return fmt.Sprintf("%s group %d", info.Kind, info.Group)
}

func runSequenceList(args []string) error {
	fs := flag.NewFlagSet("sequence list", flag.ContinueOnError)
	cf := addClientFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "ordo sequence list takes no name; ordo sequence describe NAME shows one"); err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		list, err := c.ListSequences(ctx)
		if err != nil {
			return err
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
		if *cf.json {
			return printProto(&api.ListSequencesResponse{Sequences: list})
		}
		if len(list) == 0 {
			fmt.Println("no named sequences: create one with ordo sequence create NAME --kind dense")
			return nil
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tKIND\tGROUP\tSTART\tNEXT")
		for _, s := range list {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", s.Name, s.Kind, s.Group, s.Start, s.Next)
		}
		return w.Flush()
	})
}

func runSequenceDescribe(args []string) error {
	fs := flag.NewFlagSet("sequence describe", flag.ContinueOnError)
	cf := addClientFlags(fs)
	name, err := parseName(fs, args)
	if err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		info, err := c.DescribeSequence(ctx, name)
		if err != nil {
			return err
		}
		if *cf.json {
			return printProto(info)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "name\t%s\nkind\t%s\ngroup\t%d\nstart\t%d\nnext\t%d\n", info.Name, info.Kind, info.Group, info.Start, info.Next)
		if info.Dropped {
			fmt.Fprintln(w, "dropped\ttrue")
		}
		return w.Flush()
	})
}

func runSequenceDrop(args []string) error {
	fs := flag.NewFlagSet("sequence drop", flag.ContinueOnError)
	cf := addClientFlags(fs)
	name, err := parseName(fs, args)
	if err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		if _, err := c.DropSequence(ctx, name); err != nil {
			return err
		}
		return report(cf, "dropped sequence "+name)
	})
}

// parseName parses the flags of a command that takes one sequence name,
// before or after its flags (ordo sequence create NAME --kind dense), and
// returns the name, checked (api.CheckSequenceName).
func parseName(fs *flag.FlagSet, args []string) (string, error) {
	rest, err := parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case len(rest) == 0:
		return "", fmt.Errorf("%w: give the sequence's name: ordo %s NAME", errUsage, fs.Name())
	case len(rest) > 1:
		return "", fmt.Errorf("%w: one name only, got %d arguments %q: ordo %s NAME", errUsage, len(rest), rest, fs.Name())
	}
	if err := api.CheckSequenceName(rest[0]); err != nil {
		return "", fmt.Errorf("%w: %v", errUsage, err)
	}
	return rest[0], nil
}

// checkSequenceFlag checks next's --sequence: empty is the default
// sequence, anything else a well-formed name.
func checkSequenceFlag(name string) error {
	if name == "" {
		return nil
	}
	if err := api.CheckSequenceName(name); err != nil {
		return fmt.Errorf("%w: --sequence: %v (or leave it out for the cluster's default sequence)", errUsage, err)
	}
	return nil
}

// sequenceText returns count IDs of the named sequence as text, as
// nextText does for the default one: decimal for a dense or 64-bit layout
// sequence, the canonical UUIDv7 or ULID text for a 128-bit one. The
// sequence's kind says which call to make.
func sequenceText(ctx context.Context, c *client.Client, name string, count int) ([]string, error) {
	info, err := c.DescribeSequence(ctx, name)
	if err != nil {
		return nil, err
	}
	s := c.Sequence(name)
	format := layout.Format("")
	if info.Kind != client.DenseKind {
		l, err := layout.Parse(info.Kind)
		if err != nil {
			return nil, fmt.Errorf("sequence %s is of kind %q, which this ordo does not know: %w", name, info.Kind, err)
		}
		format = l.Format
	}
	switch format {
	case layout.FormatULID:
		return texts(s.NextULIDs(ctx, count))
	case layout.FormatUUIDv7:
		return texts(s.NextUUIDs(ctx, count))
	}
	ids, err := s.NextN(ctx, count)
	if err != nil {
		return nil, err
	}
	return decimals(ids), nil
}

// printProto prints m in the API's one JSON form (api.MarshalJSON), as
// HTTP answers it, indented as printJSON does.
func printProto(m proto.Message) error {
	b, err := api.MarshalJSON(m)
	if err != nil {
		return err
	}
	return printJSON(json.RawMessage(b))
}
