// Command ordo runs an Ordo node and talks to an Ordo cluster.
//
// Every flag of ordo serve can also be set with an environment variable:
// --data-dir is ORDO_DATA_DIR, and so on. The other commands read only
// how to reach and call the cluster from the environment (ORDO_ADDRS,
// ORDO_TIMEOUT, ORDO_TLS_CA, ORDO_TLS_CERT, ORDO_TLS_KEY,
// ORDO_ADMIN_TOKEN_FILE, ORDO_CALLER: clientEnv). A flag given on the
// command line wins.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/seed-e8569b35/ordo/internal/grpcerr"
)

const usage = `ordo: a Raft-replicated sequencer of strictly ordered IDs: 64-bit snowflakes, UUIDv7s or ULIDs.

Usage: ordo <command> [flags]

Commands:
  serve            run a node
  next             get IDs (--sequence NAME, --idempotency-key K)
  reserve          get IDs that hold the settled mark back until completed or abandoned (--sequence NAME, --idempotency-key K)
  complete         settle reservation HANDLE once its IDs are published
  abandon          settle reservation HANDLE without publishing its IDs
  extend           give open reservation HANDLE more time
  watermark        show the settled mark (--sequence NAME; --watch: follow it)
  sequence         create, list, describe or drop named sequences
  status           show every node of the cluster (--sequences: and the named sequences, busiest first)
  decode           split IDs (64-bit, UUIDv7, ULID) into time, group and sequence (offline)
  join             add a node to the cluster
  remove           remove a node from the cluster
  transfer-leader  hand leadership to another node
  backup           write a consistent copy of the cluster's state to a file
  restore          build the first node of a new cluster from a backup (offline)
  verify           run clients and faults against a cluster and check the order
  bench            measure throughput and latency against a cluster
  version          print this build's version, VCS revision and Go version

Run 'ordo <command> -h' for a command's flags.
`

// errUsage marks errors that come from a bad command line (exit code 2).
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	commands := map[string]func([]string) error{
		"serve":           runServe,
		"next":            runNext,
		"reserve":         runReserve,
		"complete":        runComplete,
		"abandon":         runAbandon,
		"extend":          runExtend,
		"watermark":       runWatermark,
		"sequence":        runSequence,
		"status":          runStatus,
		"decode":          runDecode,
		"join":            runJoin,
		"remove":          runRemove,
		"transfer-leader": runTransferLeader,
		"backup":          runBackup,
		"restore":         runRestore,
		"verify":          runVerify,
		"bench":           runBench,
		"version":         runVersion,
	}
	name, args := os.Args[1], os.Args[2:]
	run, ok := commands[name]
	if !ok {
		if name == "-h" || name == "--help" || name == "help" {
			fmt.Print(usage)
			return
		}
		fmt.Fprintf(os.Stderr, "ordo: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
	if err := run(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "ordo %s: %s\n", name, grpcerr.Describe(err))
		if hint := tlsHint(err); hint != "" {
			fmt.Fprintf(os.Stderr, "ordo %s: %s\n", name, hint)
		}
		os.Exit(exitCode(err))
	}
}

// exitCode is the status a command that failed with err exits with: 2
// for a bad command line, 3 for a reservation whose IDs must not be
// published, 1 otherwise.
func exitCode(err error) int {
	switch {
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errMustNotPublish):
		return 3
	}
	return 1
}

// tlsHint suggests what to check when a connection failed in a way that
// a TLS mismatch causes: gRPC reports those only as broken connections.
func tlsHint(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "server preface") || strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:") {
		return "hint: the connection failed during setup; if the cluster uses TLS, give --tls-ca, --tls-cert and --tls-key (a client certificate signed by the cluster CA); if it does not, give none"
	}
	return ""
}

// onCommandLine reports whether args name the flag (as -name or --name,
// with or without =value).
func onCommandLine(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			continue // a value
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// envName is the environment variable that sets a flag.
func envName(flagName string) string {
	return "ORDO_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// clientEnv are the flags that every command but serve reads from the
// environment too: how to reach and call the cluster, which mean the same
// to every command that has them.
var clientEnv = map[string]bool{
	"addrs": true, "timeout": true, "tls-ca": true, "tls-cert": true, "tls-key": true,
	"admin-token-file": true, "caller": true,
}

// fromEnv reports whether command reads flag name from its ORDO_
// variable. ordo serve reads every flag so: the variables are a node's
// settings (ordo.env, a container's environment). Any other command reads
// only clientEnv, so that neither a node's own settings (ORDO_ID=n3 would
// move leadership to n3 with ordo transfer-leader, or remove n3 with ordo
// remove) nor a variable set for one command (ORDO_SEQUENCES for ordo
// bench, a number, against ordo status's switch) steer or break another.
// bench and verify do not read ORDO_ADDRS: bench's --addrs may be etcd's,
// and verify's switches it from its own cluster to a running one.
func fromEnv(command, name string) bool {
	switch {
	case command == "serve":
		return true
	case name == "addrs":
		return command != "bench" && command != "verify"
	}
	return clientEnv[name]
}

// parseFlags parses args, then fills every flag not given on the command
// line from its ORDO_ environment variable (the flags fromEnv names), and
// then, for a command with a --config flag, from that file: the command
// line wins, then the environment, then the file. A bad value is a usage
// error that names the flag, where the value came from, and what the flag
// takes.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		if fromEnv(fs.Name(), f.Name) {
			f.Usage += " [$" + envName(f.Name) + "]"
		}
	})
	if err := parseCommandLine(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if !fromEnv(fs.Name(), f.Name) {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if set[f.Name] || !ok || err != nil {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = badFlagValue(f, v, " (from $"+envName(f.Name)+")", e.Error())
		}
		set[f.Name] = true
	})
	if err != nil {
		return err
	}
	if c := fs.Lookup("config"); c != nil && c.Value.String() != "" {
		return applyConfigFile(fs, c.Value.String(), set)
	}
	return nil
}

// optionalValue is a flag that stands alone, as a bool does, or takes a
// value: --lease, --lease=2s. TakesValue says whether the argument after
// it is its value, so that "--lease 2s" means "--lease=2s" rather than a
// stray argument "2s".
type optionalValue interface {
	flag.Value
	TakesValue(arg string) bool
}

// parseCommandLine parses the command line args into fs, giving an
// optionalValue flag the argument after it when it takes it.
func parseCommandLine(fs *flag.FlagSet, args []string) error {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return explainParseError(fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 || len(rest) == len(args) {
			return nil
		}
		last := args[len(args)-len(rest)-1]
		f := fs.Lookup(strings.TrimLeft(last, "-"))
		if !strings.HasPrefix(last, "-") || strings.Contains(last, "=") || f == nil {
			return nil
		}
		v, ok := f.Value.(optionalValue)
		if !ok || !v.TakesValue(rest[0]) {
			return nil
		}
		if err := v.Set(rest[0]); err != nil {
			return badFlagValue(f, rest[0], "", err.Error())
		}
		args = rest[1:]
	}
}

// The flag package's messages for a bad command line, which name a flag
// with one dash and say only "parse error" of a bad value.
var (
	flagBadValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)
	flagNoValue  = regexp.MustCompile(`^flag needs an argument: -(\S+)$`)
	flagUnknown  = regexp.MustCompile(`^flag provided but not defined: -(\S+)$`)
)

// explainParseError is err, from fs.Parse, as a usage error that names
// the flag as --name and says what it takes.
func explainParseError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			value, uerr := strconv.Unquote(m[1])
			if uerr != nil {
				value = m[1]
			}
			return badFlagValue(f, value, "", m[3])
		}
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%w: --%s needs a value: --%s VALUE or --%s=VALUE", errUsage, m[1], m[1], m[1])
	}
	if m := flagUnknown.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%w: unknown flag --%s ('ordo %s -h' lists the flags)", errUsage, m[1], fs.Name())
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}

// badFlagValue is the usage error of value, refused by flag f with the
// reason why; from says where the value came from ("" for the command
// line). A flag of a plain type says what it takes: its own reason is
// only the flag package's "parse error".
func badFlagValue(f *flag.Flag, value, from, why string) error {
	if want := flagTakes(f); want != "" {
		if why == "parse error" {
			why = "want " + want
		} else {
			why = "want " + want + " (" + why + ")"
		}
	}
	return fmt.Errorf("%w: --%s %q%s: %s", errUsage, f.Name, value, from, why)
}

// flagTakes says what a flag of a plain type takes; "" for any other.
func flagTakes(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration such as 500ms, 3s or 1m"
	case bool:
		return "true or false"
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number, 0 or more"
	case float64:
		return "a number"
	}
	return ""
}

// applyConfigFile sets, from file, every flag not in set. The file holds
// one "name = value" a line, name being a flag's name without dashes;
// blank lines and lines starting with # are skipped. An unknown name, a
// name given twice or a bad value is an error naming the line.
func applyConfigFile(fs *flag.FlagSet, file string, set map[string]bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w: --config: %v", errUsage, err)
	}
	seen := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		where := fmt.Sprintf("%s:%d", file, i+1)
		switch {
		case !ok || name == "":
			return fmt.Errorf("%w: %s: want name = value", errUsage, where)
		case fs.Lookup(name) == nil || name == "config":
			return fmt.Errorf("%w: %s: unknown setting %q", errUsage, where, name)
		case seen[name] > 0:
			return fmt.Errorf("%w: %s: %q already set on line %d", errUsage, where, name, seen[name])
		}
		seen[name] = i + 1
		if set[name] {
			continue // the command line or the environment wins
		}
		if err := fs.Set(name, value); err != nil {
			return badFlagValue(fs.Lookup(name), value, " (from "+where+")", err.Error())
		}
	}
	return nil
}

// flagSet reports whether flag name was given: on the command line, in
// the environment or in a --config file.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
