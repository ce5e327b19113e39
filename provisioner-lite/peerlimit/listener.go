package peerlimit

import (
	"context"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ListenerConfig bounds one TCP listener of the coordinator.
type ListenerConfig struct {
	// MaxConns caps the connections open at once (required, > 0). Past
	// it a new connection is closed at once: it costs the process a
	// descriptor for a moment, never for the peer's lifetime.
	MaxConns int
	// MaxPerSource caps the connections one source holds open: an IPv4
	// address, or an IPv6 /64 (a host owns its whole /64). <= 0: MaxConns.
	MaxPerSource int
	// Silent closes a connection whose peer has sent no byte this long
	// after it was accepted (0: never). Every client of the coordinator
	// speaks first (TLS ClientHello, an HTTP request line), so a peer that
	// says nothing is holding a slot, not starting a conversation. The
	// server's own deadlines bound what follows (the TLS handshake, the
	// request headers).
	Silent time.Duration
	// Refusals summarises the refused and silent peers (nil: not logged).
	Refusals *Refusals
}

// Refusal reasons a Listener notes.
const (
	ReasonConnCap   = "conn-cap"   // MaxConns connections are open
	ReasonSourceCap = "source-cap" // the source holds MaxPerSource connections
	ReasonSilent    = "silent"     // nothing received within Silent
)

// Listener enforces a ListenerConfig on the connections of an inner
// listener. Its counters cost one small map entry per source with an open
// connection, so a flood costs what the caps allow and nothing more.
type Listener struct {
	net.Listener
	cfg ListenerConfig

	mu       sync.Mutex
	open     int
	bySource map[string]int
}

// NewListener wraps inner. MaxConns <= 0 is a programming error: every
// listener of the coordinator has a cap.
func NewListener(inner net.Listener, cfg ListenerConfig) *Listener {
	if cfg.MaxConns <= 0 {
		panic("peerlimit: ListenerConfig.MaxConns must be > 0")
	}
	if cfg.MaxPerSource <= 0 || cfg.MaxPerSource > cfg.MaxConns {
		cfg.MaxPerSource = cfg.MaxConns
	}
	return &Listener{Listener: inner, cfg: cfg, bySource: map[string]int{}}
}

// Accept returns the next connection within the caps; refused ones are
// closed (with a reset, so no state lingers) and noted, never returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := SourceKey(c.RemoteAddr())
		if reason := l.admit(src); reason != "" {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			l.cfg.Refusals.Note(reason, src)
			continue
		}
		lc := &conn{Conn: c, l: l, src: src}
		if l.cfg.Silent > 0 {
			lc.silent = time.AfterFunc(l.cfg.Silent, lc.closeIfSilent)
		}
		return lc, nil
	}
}

func (l *Listener) admit(src string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.cfg.MaxConns {
		return ReasonConnCap
	}
	if l.bySource[src] >= l.cfg.MaxPerSource {
		return ReasonSourceCap
	}
	l.open++
	l.bySource[src]++
	return ""
}

func (l *Listener) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
}

// Open is the number of connections open now, and of sources holding them.
func (l *Listener) Open() (conns, sources int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, len(l.bySource)
}

// Config is the listener's configuration, defaults applied.
func (l *Listener) Config() ListenerConfig { return l.cfg }

// Flush logs the pending refusal summary (call it periodically, so a
// flood that stopped is still reported).
func (l *Listener) Flush() { l.cfg.Refusals.Flush() }

// conn returns its slot when closed, and is closed by the listener if its
// peer stays silent.
type conn struct {
	net.Conn
	l      *Listener
	src    string
	silent *time.Timer
	heard  atomic.Bool
	once   sync.Once
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.silent != nil && !c.heard.Load() {
		c.heard.Store(true)
		c.silent.Stop()
	}
	return n, err
}

// closeIfSilent closes the socket under the server, whose pending read
// then fails and which closes (and so releases) the connection itself.
func (c *conn) closeIfSilent() {
	if c.heard.Load() {
		return
	}
	c.l.cfg.Refusals.Note(ReasonSilent, c.src)
	c.Conn.Close()
}

func (c *conn) Close() error {
	c.once.Do(func() {
		if c.silent != nil {
			c.silent.Stop()
		}
		c.l.release(c.src)
	})
	return c.Conn.Close()
}

// ReadFrom keeps the kernel's sendfile path for file downloads (the boot
// server's kernel and initramfs) through the wrapper.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// SourceKey is what a per-source cap counts: the IPv4 address, or the /64
// of an IPv6 address (an IPv4-mapped one counts as IPv4).
func SourceKey(a net.Addr) string {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		if a == nil {
			return "?"
		}
		p, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return a.String()
		}
		ap = p
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// HTTPErrorLog is the ErrorLog of an http.Server behind a Listener: the
// TLS handshake failures peers cause ("http: TLS handshake error from
// ADDR: ...") are counted into r as ReasonHandshake; handshakes the
// Listener cut for silence are already counted and are dropped; any other
// server error goes to log at Warn, at most a few every ten seconds.
func HTTPErrorLog(r *Refusals, log *slog.Logger) *stdlog.Logger {
	if log == nil {
		log = slog.Default()
	}
	return stdlog.New(&errorLog{r: r, log: log, budget: NewBucket(0.5, 5)}, "", 0)
}

// ReasonHandshake is a TLS handshake that failed or timed out.
const ReasonHandshake = "tls-handshake"

type errorLog struct {
	r      *Refusals
	log    *slog.Logger
	budget *Bucket
}

func (e *errorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		if strings.Contains(rest, net.ErrClosed.Error()) {
			return len(p), nil // the Listener closed a silent peer: noted there
		}
		addr, _, _ := strings.Cut(rest, ": ")
		src := truncate(addr, 64)
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			src = SourceKey(net.TCPAddrFromAddrPort(ap))
		}
		e.r.Note(ReasonHandshake, src)
		return len(p), nil
	}
	if e.budget.Allow() {
		e.log.Log(context.Background(), slog.LevelWarn, "http server", "err", truncate(line, 512))
	}
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
