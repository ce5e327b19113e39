// Package coordinator is provisioner-lite's coordinator as a library: it
// drives BMCs over Redfish, serves the boot chain and artifacts over HTTP,
// and talks gRPC with the runners in CURE and with curectl. Every run lives
// in its store, so a restart resumes where the runs were. The command
// (provisioner-lite/cmd/provisioner-lite) parses its flags into a Config,
// and runs New and Serve under a signal-cancelled context.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// Coordinator is one coordinator instance: New checks its Config, Serve
// runs it until its context ends.
type Coordinator struct {
	cfg     Config
	log     *slog.Logger
	started atomic.Bool
	ready   chan struct{}
	addrs   Addrs
}

// Addrs are the addresses the coordinator's listeners are bound to (port 0
// and inherited sockets resolved); "" for a listener that is off.
type Addrs struct {
	HTTP, HTTPS, GRPC, Metrics, Web string
}

// New checks cfg; nothing is opened before Serve.
func New(cfg Config) (*Coordinator, error) {
	if cfg.ClaimSettle <= 0 {
		return nil, fmt.Errorf("--claim-settle %s: want a positive duration above the slowest server's power-on-to-iPXE time "+
			"(a boot that does not attest is given secrets only after it)", cfg.ClaimSettle)
	}
	if err := checkPeerURL(cfg.Shared.PeerURL); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	cfg.ProcRoot = nonEmpty(cfg.ProcRoot, "/proc")
	return &Coordinator{cfg: cfg, log: log, ready: make(chan struct{})}, nil
}

// Ready is closed once Serve listens and has resumed the store's runs.
// It stays open if Serve fails to start: wait for Serve's return too.
func (co *Coordinator) Ready() <-chan struct{} { return co.ready }

// Addrs are the bound listen addresses; valid once Ready is closed.
func (co *Coordinator) Addrs() Addrs {
	<-co.ready
	return co.addrs
}

// Serve runs the coordinator until ctx ends, then shuts down: the servers
// stop, the engine's runs are interrupted (their leases handed back, so
// they resume at the next start, here or at a peer instance), and the
// store closes. It returns nil after a shutdown, or why it could not start
// or stopped serving. A Coordinator serves once.
func (co *Coordinator) Serve(ctx context.Context) error {
	if !co.started.CompareAndSwap(false, true) {
		return errors.New("coordinator: Serve called twice")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	d := &daemon{c: co.cfg, log: co.log, stop: stop}
	defer d.cleanup()
	for _, step := range []func(context.Context) error{
		d.preflight, d.openState, d.openShared, d.importSite, d.openListeners, d.prepareBMCs, d.wire, d.serve,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	co.addrs = d.addrs()
	close(co.ready)
	d.wait(ctx)
	d.shutdown()
	return nil
}
