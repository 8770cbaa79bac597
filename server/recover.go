package server

import (
	"time"

	"github.com/seed-e8569b35/ordo/backup"
)

// Recover makes the node of cfg the only voter of its cluster, offline,
// before Open: backup.Recover (see there for when that is safe), on cfg
// validated and with its defaults, at the addresses the node will be
// dialed at (the advertised ones when given).
func Recover(cfg Config, jump time.Duration, denseSkip uint64) (uint64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	cfg = cfg.withDefaults()
	raftAddr, grpcAddr := cfg.RaftAddr, cfg.GRPCAddr
	if cfg.RaftAdvertise != "" {
		raftAddr = cfg.RaftAdvertise
	}
	if cfg.GRPCAdvertise != "" {
		grpcAddr = cfg.GRPCAdvertise
	}
	return backup.Recover(backup.RecoverOptions{
		ID: cfg.ID, DataDir: cfg.DataDir, RaftAddr: raftAddr, GRPCAddr: grpcAddr,
		Raft: cfg.Raft, ReserveWindow: cfg.ReserveWindow, Clock: cfg.Clock,
		Jump: jump, DenseSkip: denseSkip, Logger: cfg.Logger,
	})
}
