package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/layout"
)

// errMustNotPublish marks a reservation that expired or was abandoned
// before it was completed: its IDs must not be published. It exits 3, so
// a script tells it from a failure to reach the cluster (exit 1), after
// which completing again is what to do.
var errMustNotPublish = errors.New("do NOT publish its IDs")

// ttlUsage explains --ttl for reserve and extend.
const ttlUsage = "how long the reservation lives unless completed, abandoned or extended (0: the cluster's default, 30s)"

func runReserve(args []string) error {
	fs := flag.NewFlagSet("reserve", flag.ContinueOnError)
	cf := addClientFlags(fs)
	count := fs.Int("count", 1, "how many IDs")
	ttl := fs.Duration("ttl", 0, ttlUsage)
	key := fs.String("idempotency-key", "", "key the reservation (1 to 128 bytes): run again with the same key, --count and --sequence (and --ttl, if given; and the same --caller, or certificate), it prints the same handle and IDs, opening nothing, whatever became of the reservation since (ordo complete HANDLE tells); another --count, --sequence or --ttl, or a key used for ordo next, is refused")
	sequence := fs.String("sequence", "", settleSequenceUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "give the count with --count, the TTL with --ttl and the sequence with --sequence"); err != nil {
		return err
	}
	if err := checkSequenceFlag(*sequence); err != nil {
		return err
	}
	if err := checkCount(*count); err != nil {
		return err
	}
	if err := checkTTL(*ttl); err != nil {
		return err
	}
	if len(*key) > client.MaxKeyLen {
		return fmt.Errorf("%w: --idempotency-key of %d bytes: want at most %d", errUsage, len(*key), client.MaxKeyLen)
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		if *key != "" {
			ctx = client.WithIdempotencyKey(ctx, *key)
		}
		handle, ids, err := reserveText(ctx, c, *sequence, *count, *ttl)
		if err != nil {
			return err
		}
		if *cf.json {
			return printJSON(map[string]any{"handle": handle, "ids": ids})
		}
		w := bufio.NewWriter(os.Stdout)
		fmt.Fprintln(w, handle)
		for _, id := range ids {
			fmt.Fprintln(w, id)
		}
		return w.Flush()
	})
}

// settleSequenceUsage explains --sequence for the settled-order commands.
const settleSequenceUsage = "the named sequence whose reservations and settled mark to use (ordo sequence create); the cluster's default sequence when left out"

// reserveText reserves count IDs of sequence seq ("" the default) with
// the call its layout takes, and returns the handle and the IDs as text,
// as nextText and sequenceText do.
func reserveText(ctx context.Context, c *client.Client, seq string, count int, ttl time.Duration) (string, []string, error) {
	format, err := clusterFormat(ctx, c)
	if seq != "" {
		format, err = sequenceFormat(ctx, c, seq)
	}
	if err != nil {
		return "", nil, err
	}
	s := c.Sequence(seq)
	switch format {
	case layout.FormatULID:
		handle, ids, err := s.ReserveULIDs(ctx, count, ttl)
		t, err := texts(ids, err)
		return handle, t, err
	case layout.FormatUUIDv7:
		handle, ids, err := s.ReserveUUIDs(ctx, count, ttl)
		t, err := texts(ids, err)
		return handle, t, err
	}
	r, err := s.Reserve(ctx, count, ttl)
	if err != nil {
		return "", nil, err
	}
	return r.Handle, decimals(r.IDs), nil
}

// sequenceFormat asks the cluster for named sequence name's kind: its
// format says which calls serve it ("" for the 64-bit calls, a dense
// sequence's too).
func sequenceFormat(ctx context.Context, c *client.Client, name string) (layout.Format, error) {
	info, err := c.DescribeSequence(ctx, name)
	if err != nil {
		return "", err
	}
	if info.Dropped {
		return "", fmt.Errorf("sequence %s was dropped: create it again with ordo sequence create", name)
	}
	if info.Kind == client.DenseKind {
		return "", nil
	}
	l, err := layout.Parse(info.Kind)
	if err != nil {
		return "", fmt.Errorf("sequence %s is of kind %q, which this ordo does not know: %w", name, info.Kind, err)
	}
	return l.Format, nil
}

// handleSequence is the sequence a decision names: --sequence, or when
// it is left out the one the handle names (a named sequence's handle
// does). A --sequence the handle is not of is a usage error.
func handleSequence(flagged, handle string) (string, error) {
	if err := checkSequenceFlag(flagged); err != nil {
		return "", err
	}
	h, err := api.ParseHandle(handle)
	if err != nil {
		// The cluster says what is wrong with it.
		return flagged, nil
	}
	if flagged != "" && h.Seq != flagged {
		return "", fmt.Errorf("%w: handle %s is not of sequence %s: give the handle and --sequence as ordo reserve printed and was given them", errUsage, handle, flagged)
	}
	return h.Seq, nil
}

func runComplete(args []string) error {
	fs := flag.NewFlagSet("complete", flag.ContinueOnError)
	cf := addClientFlags(fs)
	sequence := fs.String("sequence", "", settleSequenceUsage+" (the handle names it)")
	handle, err := parseHandle(fs, args)
	if err != nil {
		return err
	}
	seq, err := handleSequence(*sequence, handle)
	if err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Sequence(seq).Complete(ctx, handle); err != nil {
			return unpublishable(handle, err)
		}
		return report(cf, "completed "+handle)
	})
}

func runAbandon(args []string) error {
	fs := flag.NewFlagSet("abandon", flag.ContinueOnError)
	cf := addClientFlags(fs)
	sequence := fs.String("sequence", "", settleSequenceUsage+" (the handle names it)")
	handle, err := parseHandle(fs, args)
	if err != nil {
		return err
	}
	seq, err := handleSequence(*sequence, handle)
	if err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		fate, err := c.Sequence(seq).Abandon(ctx, handle)
		if err != nil {
			return err
		}
		// "abandoned", or "expired" when it expired first: settled either way.
		name := strings.ToLower(strings.TrimPrefix(fate.String(), "FATE_"))
		if *cf.json {
			return printJSON(map[string]string{"handle": handle, "fate": name})
		}
		fmt.Println(name)
		return nil
	})
}

func runExtend(args []string) error {
	fs := flag.NewFlagSet("extend", flag.ContinueOnError)
	cf := addClientFlags(fs)
	ttl := fs.Duration("ttl", 0, "how long the reservation lives from now (0: the cluster's default, 30s)")
	sequence := fs.String("sequence", "", settleSequenceUsage+" (the handle names it)")
	handle, err := parseHandle(fs, args)
	if err != nil {
		return err
	}
	if err := checkTTL(*ttl); err != nil {
		return err
	}
	seq, err := handleSequence(*sequence, handle)
	if err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		if err := c.Sequence(seq).Extend(ctx, handle, *ttl); err != nil {
			return unpublishable(handle, err)
		}
		return report(cf, "extended "+handle)
	})
}

// unpublishable says plainly that the IDs of a reservation that expired
// or was abandoned must not be published (errMustNotPublish); other
// errors pass as they are.
func unpublishable(handle string, err error) error {
	fate := ""
	switch {
	case errors.Is(err, client.ErrExpired):
		fate = "expired"
	case errors.Is(err, client.ErrAbandoned):
		fate = "was abandoned"
	default:
		return err
	}
	return fmt.Errorf("reservation %s %s: %w (readers past the settled mark may already have skipped them); reserve new IDs", handle, fate, errMustNotPublish)
}

func runWatermark(args []string) error {
	fs := flag.NewFlagSet("watermark", flag.ContinueOnError)
	cf := addClientFlags(fs)
	watch := fs.Bool("watch", false, "print the settled mark each time it moves, and every second while it does not, until interrupted (or --timeout, when given)")
	sequence := fs.String("sequence", "", "the named sequence whose settled mark to show, in its own IDs (a dense sequence's values); the cluster's default sequence when left out")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "give --watch to follow the mark, --sequence to name a sequence"); err != nil {
		return err
	}
	if err := checkSequenceFlag(*sequence); err != nil {
		return err
	}
	return cf.with(func(ctx context.Context, c *client.Client) error {
		s := c.Sequence(*sequence)
		if !*watch {
			m, err := s.Watermark(ctx)
			if err != nil {
				return err
			}
			return printMark(m, *cf.json)
		}
		if !flagSet(fs, "timeout") {
			ctx = context.Background() // a watch runs until interrupted
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		printed := false
		err := s.WatchWatermark(ctx, func(m client.Mark) error {
			printed = true
			return printMark(m, *cf.json)
		})
		switch {
		case errors.Is(err, context.DeadlineExceeded) && !printed:
			return fmt.Errorf("no settled mark within --timeout %s: %w", *cf.timeout, err)
		case ctx.Err() != nil:
			return nil // interrupted, or --timeout passed: the watch is done
		}
		return err
	})
}

// printMark prints m on one line: JSON (strings, as IDs are), or text.
func printMark(m client.Mark, asJSON bool) error {
	id, tick := strconv.FormatUint(m.ID, 10), strconv.FormatUint(m.Tick, 10)
	if asJSON {
		// One compact object a line, so that a watch is JSON lines.
		return json.NewEncoder(os.Stdout).Encode(map[string]string{"watermark": id, "tick": tick})
	}
	_, err := fmt.Printf("watermark %s tick %s\n", id, tick)
	return err
}

// checkTTL refuses a negative --ttl before anything is asked.
func checkTTL(ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: --ttl %s: want 0 (the cluster's default) or more", errUsage, ttl)
	}
	return nil
}

// noArgs refuses arguments a command does not take; fix says what to
// give instead.
func noArgs(fs *flag.FlagSet, fix string) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q: %s", errUsage, fs.Args(), fix)
	}
	return nil
}

// parseHandle parses the flags of a command that takes one reservation
// handle, before or after its flags (ordo extend HANDLE --ttl 1m), and
// returns the handle.
func parseHandle(fs *flag.FlagSet, args []string) (string, error) {
	rest, err := parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case len(rest) == 0:
		return "", fmt.Errorf("%w: give the reservation's handle, as ordo reserve printed it: ordo %s HANDLE", errUsage, fs.Name())
	case len(rest) > 1:
		return "", fmt.Errorf("%w: one handle only, got %d arguments %q: ordo %s HANDLE", errUsage, len(rest), rest, fs.Name())
	case rest[0] == "":
		return "", fmt.Errorf("%w: the handle is empty: give it as ordo reserve printed it", errUsage)
	}
	return rest[0], nil
}

// parseArgs is parseFlags for a command that takes arguments, and lets
// flags follow them: the flag package stops at the first argument.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var rest []string
	for fs.NArg() > 0 {
		rest = append(rest, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, explainParseError(fs, err)
		}
	}
	return rest, nil
}
