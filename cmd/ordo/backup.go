package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/server"
	"github.com/seed-e8569b35/ordo/startup"
)

// runBackup asks the leader for a consistent copy of the replicated state
// and writes it to --out, atomically.
func runBackup(args []string) error {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	cf := addClientFlags(fs)
	out := fs.String("out", "", "file to write the backup to (required); written to a temporary file, then renamed, mode 0600")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	b, err := takeBackup(cf)
	if err != nil {
		return err
	}
	if err := backup.WriteFile(*out, b); err != nil {
		return err
	}
	if *cf.json {
		return printJSON(map[string]any{"file": *out, "cluster_id": b.ClusterID, "high_water": b.HighWater, "created": b.Created, "members": b.Members})
	}
	fmt.Printf("backup of cluster %s written to %s: high-water %s (%s), %d members, taken by %s in term %d\n",
		b.ClusterID, *out, b.HighWater, b.HighWaterTime, len(b.Members), b.LeaderID, b.Term)
	return nil
}

// takeBackup calls Admin/Backup, following the leader, and builds the
// file's content.
func takeBackup(cf clientFlags) (*backup.File, error) {
	resp, err := askAdmin(cf, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (*api.BackupResponse, error) {
		return a.Backup(ctx, &api.BackupRequest{}, opts...)
	})
	if err != nil {
		return nil, err
	}
	return backup.NewFile(resp)
}

// runRestore builds, offline, the data dir of the first node of a new
// cluster from a backup.
func runRestore(args []string) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	var (
		backupPath = fs.String("backup", "", "backup file written by 'ordo backup' (required)")
		dataDir    = fs.String("data-dir", "", "data dir to build; must hold no raft state (required)")
		id         = fs.String("id", "", "id of the new cluster's first node (required)")
		raftAddr   = fs.String("raft-addr", "", "raft address peers will dial: the node's --raft-advertise if it has one, else its --raft-addr (required)")
		grpcAddr   = fs.String("grpc-addr", "", "gRPC address clients and peers will be told: the node's --grpc-advertise if it has one, else its --grpc-addr (required)")
		jump       = fs.Duration("jump", backup.DefaultRestoreJump, "how far past max(backup high-water, now) the new cluster starts; must exceed how far the old cluster's clocks could have been ahead of this host's")
		window     = fs.Duration("reserve-window", server.DefaultReserveWindow, "the old cluster's --reserve-window (how far ahead of its clock it could hand out IDs)")
		denseSkip  = fs.Uint64("dense-skip", 0, "how far every dense sequence moves past its backed-up mark: at least what the old cluster handed out after the backup (a gap of that many values); required when the backup has a dense sequence")
		force      = fs.Bool("force", false, "restore even if members of the backed-up cluster still answer (two clusters would then hand out the same IDs)")
		timeout    = fs.Duration("timeout", 10*time.Second, "give up asking the old cluster's members after this long")
		tls        = addTLSFlags(fs, "client")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *backupPath == "" || *dataDir == "" || *id == "" || *raftAddr == "" || *grpcAddr == "" {
		return fmt.Errorf("%w: --backup, --data-dir, --id, --raft-addr and --grpc-addr are required", errUsage)
	}
	if *jump < 0 {
		return fmt.Errorf("%w: --jump %s is negative", errUsage, *jump)
	}
	t, err := tls.load()
	if err != nil {
		return err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "ordo", Output: os.Stderr})
	b, err := backup.ReadFile(*backupPath)
	if err != nil {
		return err
	}
	if has, err := startup.HasState(*dataDir); err != nil {
		return err
	} else if has {
		return fmt.Errorf("%w: %s; restore builds a new node, give it an empty data dir", backup.ErrHasState, *dataDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	err = backup.CheckBackupAlive(ctx, b, t)
	cancel()
	if err != nil {
		if !*force {
			return err
		}
		logger.Warn("restoring anyway (--force)", "error", err)
	}
	res, err := backup.Restore(backup.RestoreOptions{
		Backup: b, DataDir: *dataDir, ID: *id, RaftAddr: *raftAddr, GRPCAddr: *grpcAddr,
		Jump: *jump, ReserveWindow: *window, DenseSkip: *denseSkip, Logger: logger,
	})
	if err != nil {
		return err
	}
	l := res.Layout
	fmt.Printf("restored a NEW cluster %s from backup of cluster %s (taken %s)\n", res.ClusterID, res.OldClusterID, b.Created)
	fmt.Printf("high-water %d (%s), backup had %d (%s)\n",
		res.HighWater, l.TickTime(res.HighWater).Format(time.RFC3339), res.BackupHighWater, b.HighWaterTime)
	if now := time.Now(); res.AheadUntil.After(now) {
		fmt.Printf("note: the new cluster's IDs run ahead of the clock until about %s (%s from now); until then it hands out about %d IDs in all\n"+
			"  (more after each change of leader), then answers ResourceExhausted until the clock catches up. A smaller --jump shortens\n"+
			"  this, at the cost of less protection against the old cluster's clocks having been ahead of this host's.\n",
			res.AheadUntil.Format(time.RFC3339), res.AheadUntil.Sub(now).Round(time.Second), res.AheadAllowance)
	}
	fmt.Printf("start the node:\n  ordo serve --id %s --data-dir %s --raft-addr %s --grpc-addr %s --layout '%s' --group %d\n",
		*id, *dataDir, *raftAddr, *grpcAddr, l.String(), res.Group)
	fmt.Printf("then start the others with --join %s (same --layout and --group; add your TLS and advertise flags to every command)\n", *grpcAddr)
	return nil
}
