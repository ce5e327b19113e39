package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profiler pulls the coordinator's profiles over its --pprof-listen port:
// consecutive CPU profiles while the batch runs, the heap once it ended.
type profiler struct {
	dir, addr string
	nodes     int
	ctx       context.Context // ended by stop
	cancel    context.CancelFunc
	done      chan struct{}
}

func newProfiler(dir string, nodes int) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A free loopback port for the coordinator to listen on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &profiler{dir: dir, addr: addr, nodes: nodes, done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

func (p *profiler) fetch(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	f, err := os.Create(filepath.Join(p.dir, file))
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// run takes 15 s CPU profiles back to back until stop, with the heap
// and the goroutines after each.
func (p *profiler) run() {
	defer close(p.done)
	ctx := p.ctx
	for i := 0; ctx.Err() == nil; i++ {
		err := p.fetch(ctx, "/debug/pprof/profile?seconds=15", fmt.Sprintf("n%d.cpu%03d.pprof", p.nodes, i))
		if err == nil {
			// What is live mid-batch, not only once it ended.
			p.fetch(ctx, "/debug/pprof/heap", fmt.Sprintf("n%d.heap%03d.pprof", p.nodes, i))
			p.fetch(ctx, "/debug/pprof/goroutine", fmt.Sprintf("n%d.goroutine%03d.pprof", p.nodes, i))
		}
		if err != nil && ctx.Err() == nil {
			// The coordinator is not up yet, or was restarted.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// stop ends the CPU profiling (the profile in flight is lost) and saves
// the heap.
func (p *profiler) stop(ctx context.Context) {
	p.cancel()
	<-p.done
	if err := p.fetch(ctx, "/debug/pprof/heap", fmt.Sprintf("n%d.heap.pprof", p.nodes)); err != nil {
		fmt.Fprintf(os.Stderr, "bench-fleet: heap profile: %v\n", err)
	}
}
