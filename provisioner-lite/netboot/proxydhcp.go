package netboot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
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
	// Inventory says which MACs belong to nodes CURE manages. Nil: none
	// do (then AnswerUnknown must be set).
	Inventory Inventory
	// AnswerUnknown answers PXE clients whose MAC is not in the inventory
	// too; by default they are left to whatever else answers them.
	AnswerUnknown bool
	// OnUnknown, if set, hears of each PXE request from a MAC not in the
	// inventory that is within its budget (a flood is held by the budgets
	// first): the coordinator shows it on the runs waiting for CURE, where
	// a mistyped inventory MAC is the likely cause.
	OnUnknown func(mac, source string)
	// Rate and Burst bound the inventory nodes' requests handled per
	// second, all together (default 50, burst 200); beyond them requests
	// are dropped and counted. Requests of other MACs never draw on it:
	// answered (AnswerUnknown), they have a budget of the same size of
	// their own.
	Rate  float64
	Burst int
	// PerMACRate and PerMACBurst bound one MAC's requests (default 2 a
	// second, burst 10: firmware and iPXE send a few per boot).
	PerMACRate  float64
	PerMACBurst int
	// PerAddrRate and PerAddrBurst bound the requests of MACs outside the
	// inventory from one source address (default 20 a second, burst 100);
	// clients without an address all send from 0.0.0.0.
	PerAddrRate  float64
	PerAddrBurst int
	Log          *slog.Logger
	// Standby, if set and true, leaves every request unanswered (counted
	// as ignored): another coordinator instance holds the front door's
	// lease and answers; this one takes over when it gets the lease.
	Standby func() bool
}

// Inventory is the inventory check of every boot request. It runs before
// any budget is charged, for floods too, so Lookup answers from memory.
type Inventory interface {
	// Lookup names the node mac belongs to, if any.
	Lookup(mac string) (node string, ok bool)
	// Missed says a MAC was not found (and its request was within its
	// budget): the inventory may have grown since it was read.
	Missed()
}

// Stats are the proxy's counters.
type Stats struct {
	Received, Answered, Ignored, Refused, Dropped, Failed uint64
}

// ProxyDHCP answers network boot clients on UDP 67 and 4011. It never
// hands out an address.
type ProxyDHCP struct {
	cfg Config
	log *slog.Logger
	// The sockets.
	dhcpConn, pxeConn *net.UDPConn

	// Budgets: inventory nodes per MAC and together; other MACs per MAC,
	// per source address, and together (when answered). Apart, so a flood
	// of unknown MACs never spends what the inventory's nodes need.
	knownMAC   *peerlimit.Keyed
	known      *peerlimit.Bucket
	unknownMAC *peerlimit.Keyed
	unknownSrc *peerlimit.Keyed
	unknown    *peerlimit.Bucket
	refusals   *peerlimit.Refusals
	answerLog  *peerlimit.Bucket // info lines for answers to unknown MACs
	failLog    *peerlimit.Bucket // error lines for replies not sent

	received, answered, ignored, refused, dropped, failed atomic.Uint64
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
	if cfg.Inventory == nil && !cfg.AnswerUnknown {
		return nil, errors.New("proxy DHCP: no inventory and AnswerUnknown off: no client would be answered")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	defF := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	defI := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defF(&cfg.Rate, 50)
	defI(&cfg.Burst, 200)
	defF(&cfg.PerMACRate, 2)
	defI(&cfg.PerMACBurst, 10)
	defF(&cfg.PerAddrRate, 20)
	defI(&cfg.PerAddrBurst, 100)
	if cfg.DHCPAddr == nil {
		cfg.DHCPAddr = &net.UDPAddr{IP: net.IPv4zero, Port: DHCPPort}
	}
	if cfg.PXEAddr == nil {
		cfg.PXEAddr = &net.UDPAddr{IP: net.IPv4zero, Port: PXEPort}
	}
	p := &ProxyDHCP{cfg: cfg, log: cfg.Log,
		knownMAC:   peerlimit.NewKeyed(cfg.PerMACRate, cfg.PerMACBurst, 0),
		known:      peerlimit.NewBucket(cfg.Rate, cfg.Burst),
		unknownMAC: peerlimit.NewKeyed(cfg.PerMACRate, cfg.PerMACBurst, 0),
		unknownSrc: peerlimit.NewKeyed(cfg.PerAddrRate, cfg.PerAddrBurst, 0),
		unknown:    peerlimit.NewBucket(cfg.Rate, cfg.Burst),
		refusals:   peerlimit.NewRefusals(cfg.Log, "proxy-dhcp", slog.LevelInfo, 0),
		answerLog:  peerlimit.NewBucket(1, 20),
		failLog:    peerlimit.NewBucket(0.1, 1),
	}
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
	// Replies never wait for room in the send buffer (sendNoWait); a larger
	// one holds what the budgets let through towards addresses that do not
	// resolve (about 100 replies a second for the ~3 s ARP gives up after).
	for _, c := range []*net.UDPConn{p.dhcpConn, p.pxeConn} {
		_ = c.SetWriteBuffer(1 << 20)
	}
	return p, nil
}

// Serve answers until ctx ends, then closes both sockets.
func (p *ProxyDHCP) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- p.serve(p.dhcpConn, DHCPPort) }()
	go func() { errc <- p.serve(p.pxeConn, PXEPort) }()
	p.log.Info("proxy DHCP serving", "interface", p.cfg.Interface, "server_ip", p.cfg.ServerIP,
		"dhcp", p.cfg.DHCPAddr, "pxe", p.cfg.PXEAddr, "script", p.cfg.Boot.ScriptURL, "builds", p.cfg.Boot.archList(),
		"unknown_macs", map[bool]string{true: "answered", false: "ignored"}[p.cfg.AnswerUnknown])
	flush := time.NewTicker(10 * time.Second)
	defer flush.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errc:
			break loop
		case <-flush.C:
			p.refusals.Flush() // a flood that stopped is still summarised
		}
	}
	p.dhcpConn.Close()
	p.pxeConn.Close()
	p.refusals.Flush()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("proxy DHCP: %w", err)
}

// serve reads one socket and handles each request before reading the
// next: a request costs a parse, a map lookup and a few token buckets, so
// a flood queues in the socket's buffer (and is dropped there), never in
// goroutines or memory here.
func (p *ProxyDHCP) serve(conn *net.UDPConn, port int) error {
	buf := make([]byte, 4096)
	for {
		n, from, err := conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("read port %d: %w", port, err)
		}
		p.received.Add(1)
		if p.cfg.Standby != nil && p.cfg.Standby() {
			p.ignored.Add(1)
			continue
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			p.ignored.Add(1)
			continue
		}
		// A client without an address is answered by broadcast.
		peer := from
		if peer.IP.To4() == nil || peer.IP.To4().Equal(net.IPv4zero) {
			peer = &net.UDPAddr{IP: net.IPv4bcast, Port: from.Port}
		}
		if err := p.handle(conn, from, peer, m, port); err != nil {
			// A full send buffer under a flood fails every reply: counted
			// and summarised, an error in full every 10 s at most.
			p.failed.Add(1)
			p.refusals.Note(refusedNotSent, from.IP.String())
			level := slog.LevelDebug
			if p.failLog.Allow() {
				level = slog.LevelError
			}
			p.log.Log(context.Background(), level, "proxy DHCP: reply failed", "port", port, "peer", from, "err", err)
		}
	}
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

// Reasons of refusals, summarised in the log by peerlimit.Refusals.
const (
	refusedOverRate      = "over-rate"
	refusedUnknownMAC    = "unknown-mac"
	refusedUnknownBudget = "unknown-mac-over-budget"
	refusedUnsupported   = "unsupported-client"
	refusedNotSent       = "reply-not-sent"
)

// handle decides on one request: the inventory check comes first (from
// memory), then the budget of the request's kind is charged, then the
// answer is built.
func (p *ProxyDHCP) handle(conn *net.UDPConn, from, peer *net.UDPAddr, m *dhcpv4.DHCPv4, port int) error {
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
	c, cerr := Classify(m)
	if errors.Is(cerr, ErrNotBootClient) {
		p.ignored.Add(1)
		p.log.Debug("proxy DHCP: ignored", "port", port, "mac", m.ClientHWAddr, "type", m.MessageType(), "why", cerr)
		return nil
	}
	// Classify has checked chaddr is an Ethernet address either way.
	mac := m.ClientHWAddr.String()
	node, known := "", false
	if p.cfg.Inventory != nil {
		node, known = p.cfg.Inventory.Lookup(mac)
	}
	if known {
		if !p.knownMAC.Allow(mac) || !p.known.Allow() {
			p.dropped.Add(1)
			p.refusals.Note(refusedOverRate, mac)
			return nil
		}
	} else {
		src := from.IP.String()
		if !p.unknownMAC.Allow(mac) || !p.unknownSrc.Allow(src) {
			p.dropped.Add(1)
			p.refusals.Note(refusedUnknownBudget, src)
			return nil
		}
		if p.cfg.Inventory != nil {
			p.cfg.Inventory.Missed()
		}
		if cerr == nil && p.cfg.OnUnknown != nil {
			p.cfg.OnUnknown(mac, src)
		}
		if !p.cfg.AnswerUnknown {
			p.ignored.Add(1)
			p.refusals.Note(refusedUnknownMAC, mac)
			return nil
		}
		if !p.unknown.Allow() {
			p.dropped.Add(1)
			p.refusals.Note(refusedOverRate, mac)
			return nil
		}
	}
	if cerr != nil {
		p.refused.Add(1)
		if known { // a node of ours that cannot boot: worth a line each (within its budget)
			p.log.Warn("proxy DHCP: not answered", "node", node, "port", port, "mac", mac, "err", cerr)
		} else {
			p.refusals.Note(refusedUnsupported, mac)
		}
		return nil
	}
	a, err := p.cfg.Boot.Answer(c)
	if err != nil {
		p.refused.Add(1)
		if known {
			p.log.Warn("proxy DHCP: not answered", "node", node, "mac", c.MAC, "port", port, "arch", uint16(c.Arch), "stage", c.Stage, "err", err)
		} else {
			p.refusals.Note(refusedUnsupported, mac)
		}
		return nil
	}
	r, err := Reply(m, c, a, p.cfg.ServerIP, reply)
	if err != nil {
		return fmt.Errorf("reply to %s: %w", c.MAC, err)
	}
	dst := replyAddr(m, peer, port)
	if err := sendNoWait(conn, r.ToBytes(), dst, nil); err != nil {
		return fmt.Errorf("send %s: %w", reply, err)
	}
	p.answered.Add(1)
	level := slog.LevelInfo
	if !known && !p.answerLog.Allow() {
		level = slog.LevelDebug // answers to any MAC: a flood of them is counted, not written
	}
	p.log.Log(context.Background(), level, "proxy DHCP: answered", "node", node, "mac", c.MAC, "port", port, "reply", reply.String(),
		"arch", uint16(c.Arch), "stage", c.Stage, "file", a.File, "to", dst)
	return nil
}

// replyAddr is where a reply goes: through the relay (giaddr:67) when the
// request was relayed; broadcast when the client has no address;
// otherwise back to the sender.
func replyAddr(m *dhcpv4.DHCPv4, peer *net.UDPAddr, port int) *net.UDPAddr {
	if gw := m.GatewayIPAddr; gw != nil && !gw.IsUnspecified() && port == DHCPPort {
		return &net.UDPAddr{IP: gw, Port: DHCPPort}
	}
	return peer
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
