package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/hashicorp/go-hclog"
)

// servePprof serves Go's profiler on addr until stop is called, and returns
// the address it listens on (port 0 picks a free one). Only a
// loopback address is taken: profiles show the process's internals and
// cost CPU, so they are for whoever is logged in to the machine.
func servePprof(addr string, logger hclog.Logger) (bound string, stop func(), err error) {
	if err := checkPprofAddr(addr); err != nil {
		return "", nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen for pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("pprof server stopped", "error", err)
		}
	}()
	logger.Info("serving the profiler", "addr", lis.Addr().String())
	return lis.Addr().String(), func() { srv.Close() }, nil
}

// checkPprofAddr refuses a --pprof-addr that is not a loopback host:port.
func checkPprofAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: --pprof-addr %q: want a loopback host:port, such as 127.0.0.1:6060 (%v)", errUsage, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: --pprof-addr %q: only a loopback address is served (127.0.0.1:PORT)", errUsage, addr)
	}
	return nil
}
