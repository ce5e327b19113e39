package netboot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// Ports of proxy DHCP: the DHCP server port (offers to DISCOVERs, beside
// the site's DHCP server) and the PXE boot server port (ACKs to the
// ProxyDHCP REQUEST a client sends once it has its address).
const (
	DHCPPort = 67
	PXEPort  = 4011
)

// ErrUnknownMAC is what Config.Known wraps for a MAC not in the inventory.
var ErrUnknownMAC = errors.New("MAC not in the inventory")

// Config configures a ProxyDHCP.
type Config struct {
	// Interface is the provisioning network's interface: both sockets are
	// bound to it (SO_BINDTODEVICE) and broadcasts go out of it. Empty only
	// in tests on loopback.
	Interface string
	// ServerIP is the next-server (TFTP) and server identifier in replies:
	// an address of Interface the nodes reach.
	ServerIP net.IP
	// DHCPAddr and PXEAddr override the listen addresses (tests); default
	// 0.0.0.0:67 and 0.0.0.0:4011.
	DHCPAddr, PXEAddr *net.UDPAddr
	Boot              Boot
	// Known says whether mac belongs to a node CURE manages and names it;
	// an error wrapping ErrUnknownMAC keeps the proxy silent for that MAC,
	// so PXE clients CURE does not manage are left to whatever else answers
	// them. Nil: every PXE client is answered.
	Known func(ctx context.Context, mac string) (node string, err error)
	// Rate and Burst bound the requests handled per second (default 50,
	// burst 200); beyond them requests are dropped and counted.
	Rate  float64
	Burst int
	Log   *slog.Logger
}

// Stats are the proxy's counters.
type Stats struct {
	Received, Answered, Ignored, Refused, Dropped, Failed uint64
}

// ProxyDHCP answers network boot clients on UDP 67 and 4011. It never
// hands out an address.
type ProxyDHCP struct {
	cfg  Config
	log  *slog.Logger
	dhcp *server4.Server
	pxe  *server4.Server
	// The sockets, kept for their addresses.
	dhcpConn, pxeConn *net.UDPConn
	lim               *limiter

	received, answered, ignored, refused, dropped, failed atomic.Uint64
	lastDropLog                                           atomic.Int64
}

// NewProxyDHCP opens both sockets (so a port already taken is an error at
// start) without serving yet.
func NewProxyDHCP(cfg Config) (*ProxyDHCP, error) {
	if cfg.ServerIP.To4() == nil {
		return nil, fmt.Errorf("proxy DHCP: server IP %v is not an IPv4 address", cfg.ServerIP)
	}
	if cfg.Boot.ScriptURL == "" {
		return nil, errors.New("proxy DHCP: Boot.ScriptURL is empty: iPXE clients need the boot script's URL")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 50
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 200
	}
	if cfg.DHCPAddr == nil {
		cfg.DHCPAddr = &net.UDPAddr{IP: net.IPv4zero, Port: DHCPPort}
	}
	if cfg.PXEAddr == nil {
		cfg.PXEAddr = &net.UDPAddr{IP: net.IPv4zero, Port: PXEPort}
	}
	p := &ProxyDHCP{cfg: cfg, log: cfg.Log, lim: newLimiter(cfg.Rate, cfg.Burst)}
	var err error
	// The library's socket sets SO_REUSEADDR and SO_REUSEPORT, so a site
	// DHCP server on this host bound with the same options (dnsmasq with
	// --bind-interfaces) can share port 67; broadcasts reach both.
	p.dhcpConn, err = server4.NewIPv4UDPConn(cfg.Interface, cfg.DHCPAddr)
	if err != nil {
		return nil, fmt.Errorf("proxy DHCP: listen %s on %q: %w", cfg.DHCPAddr, cfg.Interface, err)
	}
	p.pxeConn, err = server4.NewIPv4UDPConn(cfg.Interface, cfg.PXEAddr)
	if err != nil {
		p.dhcpConn.Close()
		return nil, fmt.Errorf("proxy DHCP: listen %s on %q: %w", cfg.PXEAddr, cfg.Interface, err)
	}
	// NewServer with WithConn cannot fail.
	p.dhcp, _ = server4.NewServer(cfg.Interface, nil, p.handler(DHCPPort), server4.WithConn(p.dhcpConn))
	p.pxe, _ = server4.NewServer(cfg.Interface, nil, p.handler(PXEPort), server4.WithConn(p.pxeConn))
	return p, nil
}

// Serve answers until ctx ends, then closes both sockets.
func (p *ProxyDHCP) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- p.dhcp.Serve() }()
	go func() { errc <- p.pxe.Serve() }()
	p.log.Info("proxy DHCP serving", "interface", p.cfg.Interface, "server_ip", p.cfg.ServerIP,
		"dhcp", p.cfg.DHCPAddr, "pxe", p.cfg.PXEAddr, "script", p.cfg.Boot.ScriptURL, "builds", p.cfg.Boot.archList())
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	p.dhcp.Close()
	p.pxe.Close()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("proxy DHCP: %w", err)
}

// Addrs are the bound addresses of the DHCP and PXE sockets.
func (p *ProxyDHCP) Addrs() (dhcp, pxe *net.UDPAddr) {
	return p.dhcpConn.LocalAddr().(*net.UDPAddr), p.pxeConn.LocalAddr().(*net.UDPAddr)
}

// Stats returns the counters.
func (p *ProxyDHCP) Stats() Stats {
	return Stats{Received: p.received.Load(), Answered: p.answered.Load(), Ignored: p.ignored.Load(),
		Refused: p.refused.Load(), Dropped: p.dropped.Load(), Failed: p.failed.Load()}
}

// knownTimeout bounds the inventory lookup per request: firmware retries
// its DISCOVER within seconds.
const knownTimeout = 2 * time.Second

func (p *ProxyDHCP) handler(port int) server4.Handler {
	return func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
		p.received.Add(1)
		if !p.lim.allow() {
			p.dropped.Add(1)
			p.logDrops()
			return
		}
		if err := p.handle(conn, peer, m, port); err != nil {
			p.failed.Add(1)
			p.log.Error("proxy DHCP: reply failed", "port", port, "peer", peer, "err", err)
		}
	}
}

func (p *ProxyDHCP) handle(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4, port int) error {
	var reply dhcpv4.MessageType
	switch mt := m.MessageType(); {
	case port == DHCPPort && mt == dhcpv4.MessageTypeDiscover:
		reply = dhcpv4.MessageTypeOffer
	case port == PXEPort && (mt == dhcpv4.MessageTypeRequest || mt == dhcpv4.MessageTypeInform):
		reply = dhcpv4.MessageTypeAck
	default:
		// REQUESTs on 67 are for the site's DHCP server; everything else
		// is not ours either.
		p.ignored.Add(1)
		p.log.Debug("proxy DHCP: ignored", "port", port, "mac", m.ClientHWAddr, "type", m.MessageType())
		return nil
	}
	c, err := Classify(m)
	if errors.Is(err, ErrNotBootClient) {
		p.ignored.Add(1)
		p.log.Debug("proxy DHCP: ignored", "port", port, "mac", m.ClientHWAddr, "type", m.MessageType(), "why", err)
		return nil
	}
	if err != nil {
		p.refused.Add(1)
		p.log.Warn("proxy DHCP: not answered", "port", port, "mac", m.ClientHWAddr, "err", err)
		return nil
	}
	node := ""
	if p.cfg.Known != nil {
		ctx, cancel := context.WithTimeout(context.Background(), knownTimeout)
		node, err = p.cfg.Known(ctx, c.MAC)
		cancel()
		if errors.Is(err, ErrUnknownMAC) {
			p.ignored.Add(1)
			p.log.Debug("proxy DHCP: not answered: MAC not in the inventory", "mac", c.MAC, "port", port)
			return nil
		}
		if err != nil {
			return fmt.Errorf("inventory lookup of %s: %w", c.MAC, err)
		}
	}
	a, err := p.cfg.Boot.Answer(c)
	if err != nil {
		p.refused.Add(1)
		p.log.Warn("proxy DHCP: not answered", "node", node, "mac", c.MAC, "port", port, "arch", uint16(c.Arch), "stage", c.Stage, "err", err)
		return nil
	}
	r, err := Reply(m, c, a, p.cfg.ServerIP, reply)
	if err != nil {
		return fmt.Errorf("reply to %s: %w", c.MAC, err)
	}
	dst := replyAddr(m, peer, port)
	if _, err := conn.WriteTo(r.ToBytes(), dst); err != nil {
		return fmt.Errorf("send %s to %s: %w", reply, dst, err)
	}
	p.answered.Add(1)
	p.log.Info("proxy DHCP: answered", "node", node, "mac", c.MAC, "port", port, "reply", reply.String(),
		"arch", uint16(c.Arch), "stage", c.Stage, "file", a.File, "to", dst)
	return nil
}

// replyAddr is where a reply goes: through the relay (giaddr:67) when the
// request was relayed; broadcast (the library's peer) when the client has
// no address; otherwise back to the sender.
func replyAddr(m *dhcpv4.DHCPv4, peer net.Addr, port int) net.Addr {
	if gw := m.GatewayIPAddr; gw != nil && !gw.IsUnspecified() && port == DHCPPort {
		return &net.UDPAddr{IP: gw, Port: DHCPPort}
	}
	return peer
}

func (p *ProxyDHCP) logDrops() {
	now := time.Now().Unix()
	last := p.lastDropLog.Load()
	if now-last >= 10 && p.lastDropLog.CompareAndSwap(last, now) {
		p.log.Warn("proxy DHCP: requests over the rate limit dropped", "dropped_total", p.dropped.Load(), "rate", p.cfg.Rate, "burst", p.cfg.Burst)
	}
}

// limiter is a token bucket that drops instead of waiting: a DHCP client
// retries, and a flood must not queue work.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

func (l *limiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// InterfaceIPv4 is the first IPv4 address of the named interface: the
// proxy's server IP when none is given.
func InterfaceIPv4(name string) (net.IP, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.To4(), nil
		}
	}
	return nil, fmt.Errorf("interface %q has no IPv4 address: the proxy DHCP needs one the nodes reach", name)
}
