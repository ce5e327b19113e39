package harness

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// streamProxy forwards TCP connections to the coordinator's gRPC port, so a
// test can cut the nodes' streams at a chosen moment (CutRunnerStreams) the
// way a flapping switch port would. Each connection dials the target afresh,
// so the proxy survives coordinator restarts.
type streamProxy struct {
	l      net.Listener
	target string
	log    *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newStreamProxy(target string, log *slog.Logger) (*streamProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &streamProxy{l: l, target: target, log: log, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *streamProxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

func (p *streamProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return // listener closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *streamProxy) serve(c net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.log.Warn("stream proxy: dial coordinator", "target", p.target, "err", err)
		c.Close()
		return
	}
	p.track(c, up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Either side ending ends both: a half-open gRPC stream would
		// only hide the cut.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.untrack(c, up)
}

func (p *streamProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

func (p *streamProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// cut closes every proxied connection and returns how many connection
// pairs it closed.
func (p *streamProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	clear(p.conns)
	return n
}

func (p *streamProxy) close() {
	p.l.Close()
	p.cut()
	p.wg.Wait()
}

// CutRunnerStreams closes every node-to-coordinator gRPC connection going
// through the proxy (Options.ProxyRunnerStreams) and returns how many it cut.
// The nodes notice a reset connection and dial again, through the proxy.
func (e *Env) CutRunnerStreams() int {
	if e.proxy == nil {
		return 0
	}
	return e.proxy.cut()
}
