// Package lldp hears the switches a node is cabled to: it listens for LLDP
// (IEEE 802.1AB) frames on every port with link for a bounded time and
// reports, per port, the neighbour's chassis, port and system name. Frames
// are decoded by gopacket's layers package (pure Go, no pcap); this
// package owns only the listening (AF_PACKET sockets behind the Open seam,
// so tests feed frames) and the bounds. What a port heard is a fact: the
// coordinator judges it against the site's cabling map.
package lldp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// EtherType is LLDP's EtherType (ETH_P_LLDP).
const EtherType = 0x88cc

// MaxWindow bounds any listening window: 35 s covers the 30 s default
// transmit interval of LLDP agents plus a port's link training.
const MaxWindow = 35 * time.Second

// maxField bounds each reported string (the TLVs carry at most 255 bytes).
const maxField = 255

// Neighbour is what one port heard: the switch at the other end of its cable.
type Neighbour struct {
	Port             string // the local interface that heard it
	ChassisID        string // a MAC as aa:bb:cc:dd:ee:ff, an address as text, else the ID as sent
	ChassisIDSubtype string // mac, network-address, interface-name, local...
	PortID           string
	PortIDSubtype    string
	PortDescription  string
	SystemName       string
	TTL              time.Duration
}

// ErrNotLLDP is returned by Decode for a frame that is not an LLDPDU.
var ErrNotLLDP = errors.New("not an LLDP frame")

// Decode reads one Ethernet frame carrying an LLDPDU. Malformed input is
// an error, never a panic (gopacket recovers its decoders' panics into a
// decode failure, which is reported as one).
func Decode(frame []byte) (Neighbour, error) {
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: false, NoCopy: true})
	if fail := p.ErrorLayer(); fail != nil {
		return Neighbour{}, fmt.Errorf("lldp: decoding frame: %w", fail.Error())
	}
	l, ok := p.Layer(layers.LayerTypeLinkLayerDiscovery).(*layers.LinkLayerDiscovery)
	if !ok {
		return Neighbour{}, ErrNotLLDP
	}
	n := Neighbour{
		ChassisID:        chassisID(l.ChassisID),
		ChassisIDSubtype: chassisSubtype(l.ChassisID.Subtype),
		PortID:           portID(l.PortID),
		PortIDSubtype:    portSubtype(l.PortID.Subtype),
		TTL:              time.Duration(l.TTL) * time.Second,
	}
	if info, ok := p.Layer(layers.LayerTypeLinkLayerDiscoveryInfo).(*layers.LinkLayerDiscoveryInfo); ok {
		n.SystemName = clean([]byte(info.SysName))
		n.PortDescription = clean([]byte(info.PortDescription))
	}
	if n.ChassisID == "" || n.PortID == "" {
		return Neighbour{}, errors.New("lldp: LLDPDU without a chassis ID or port ID")
	}
	return n, nil
}

func chassisID(c layers.LLDPChassisID) string {
	switch c.Subtype {
	case layers.LLDPChassisIDSubTypeMACAddr:
		if len(c.ID) == 6 {
			return net.HardwareAddr(c.ID).String()
		}
	case layers.LLDPChassisIDSubTypeNetworkAddr:
		return networkAddr(c.ID)
	}
	return clean(c.ID)
}

func portID(p layers.LLDPPortID) string {
	switch p.Subtype {
	case layers.LLDPPortIDSubtypeMACAddr:
		if len(p.ID) == 6 {
			return net.HardwareAddr(p.ID).String()
		}
	case layers.LLDPPortIDSubtypeNetworkAddr:
		return networkAddr(p.ID)
	}
	return clean(p.ID)
}

// networkAddr is an IANA address family byte then the address (RFC 2922).
func networkAddr(b []byte) string {
	if len(b) == 5 && b[0] == 1 || len(b) == 17 && b[0] == 2 {
		return net.IP(b[1:]).String()
	}
	return clean(b)
}

func chassisSubtype(s layers.LLDPChassisIDSubType) string {
	switch s {
	case layers.LLDPChassisIDSubTypeChassisComp:
		return "chassis-component"
	case layers.LLDPChassisIDSubtypeIfaceAlias:
		return "interface-alias"
	case layers.LLDPChassisIDSubTypePortComp:
		return "port-component"
	case layers.LLDPChassisIDSubTypeMACAddr:
		return "mac"
	case layers.LLDPChassisIDSubTypeNetworkAddr:
		return "network-address"
	case layers.LLDPChassisIDSubtypeIfaceName:
		return "interface-name"
	case layers.LLDPChassisIDSubTypeLocal:
		return "local"
	case layers.LLDPChassisIDSubTypeReserved:
		return "reserved"
	}
	return fmt.Sprintf("subtype-%d", byte(s))
}

func portSubtype(s layers.LLDPPortIDSubType) string {
	switch s {
	case layers.LLDPPortIDSubtypeIfaceAlias:
		return "interface-alias"
	case layers.LLDPPortIDSubtypePortComp:
		return "port-component"
	case layers.LLDPPortIDSubtypeMACAddr:
		return "mac"
	case layers.LLDPPortIDSubtypeNetworkAddr:
		return "network-address"
	case layers.LLDPPortIDSubtypeIfaceName:
		return "interface-name"
	case layers.LLDPPortIDSubtypeAgentCircuitID:
		return "agent-circuit-id"
	case layers.LLDPPortIDSubtypeLocal:
		return "local"
	case layers.LLDPPortIDSubtypeReserved:
		return "reserved"
	}
	return fmt.Sprintf("subtype-%d", byte(s))
}

// clean makes a TLV's bytes one printable line, bounded: a switch's strings
// reach logs, reports and the coordinator's store.
func clean(b []byte) string {
	if len(b) > maxField {
		b = b[:maxField]
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = '?'
		}
		sb.WriteRune(r)
	}
	return strings.TrimSpace(sb.String())
}

// Conn is one port's frame source: Read returns the next frame received
// (never one the node sent), or an error once the deadline passed or the
// conn was closed.
type Conn interface {
	Read(buf []byte, deadline time.Time) (int, error)
	Close() error
}

// Options tune Listen.
type Options struct {
	// Window bounds the whole listen (capped at MaxWindow; 0: nothing is
	// listened for).
	Window time.Duration
	// Ports lists the ports with link now; it is asked again every Rescan
	// so a port that trains late is listened on too.
	Ports func() ([]string, error)
	// Open opens one port's frame source (OpenPacket on Linux).
	Open   func(port string) (Conn, error)
	Rescan time.Duration // default 1 s
	Log    *slog.Logger
}

// Result is what a listen heard.
type Result struct {
	Listened   []string             // the ports listened on (with link), sorted
	Neighbours map[string]Neighbour // by port: the first valid LLDPDU each heard
	Waited     time.Duration
}

// Listen listens on every port with link until each has heard a neighbour,
// the window passes, or ctx ends. Ports that cannot be opened are logged
// and left out of Listened.
func Listen(ctx context.Context, o Options) Result {
	start := time.Now()
	if o.Window > MaxWindow {
		o.Window = MaxWindow
	}
	if o.Rescan <= 0 {
		o.Rescan = time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	res := Result{Neighbours: map[string]Neighbour{}}
	if o.Window <= 0 {
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, o.Window)
	defer cancel()
	l := &listen{o: o, res: &res, conns: map[string]Conn{}, heard: make(chan struct{}, 1)}
	defer l.closeAll()
	tick := time.NewTicker(o.Rescan)
	defer tick.Stop()
	for {
		l.openNew(ctx)
		if l.complete() {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		case <-l.heard:
			continue
		}
		break
	}
	l.closeAll()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Strings(res.Listened)
	res.Waited = time.Since(start)
	return res
}

type listen struct {
	o     Options
	res   *Result
	mu    sync.Mutex
	conns map[string]Conn
	heard chan struct{}
	wg    sync.WaitGroup
}

// openNew starts a reader on each port with link not yet listened on.
func (l *listen) openNew(ctx context.Context) {
	ports, err := l.o.Ports()
	if err != nil {
		l.o.Log.Warn("lldp: listing ports with link", "err", err)
		return
	}
	deadline, _ := ctx.Deadline()
	for _, p := range ports {
		l.mu.Lock()
		_, have := l.conns[p]
		l.mu.Unlock()
		if have {
			continue
		}
		c, err := l.o.Open(p)
		if err != nil {
			l.o.Log.Warn("lldp: not listening on port", "port", p, "err", err)
			l.mu.Lock()
			l.conns[p] = nil // tried once: not again each rescan
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		l.conns[p] = c
		l.res.Listened = append(l.res.Listened, p)
		l.mu.Unlock()
		l.wg.Add(1)
		go l.read(p, c, deadline)
	}
}

// read keeps the first valid LLDPDU of one port; other frames are ignored.
func (l *listen) read(port string, c Conn, deadline time.Time) {
	defer l.wg.Done()
	buf := make([]byte, 9216)
	for {
		n, err := c.Read(buf, deadline)
		if err != nil {
			return
		}
		nb, err := Decode(buf[:n])
		if err != nil {
			l.o.Log.Debug("lldp: frame ignored", "port", port, "err", err)
			continue
		}
		nb.Port = port
		l.mu.Lock()
		l.res.Neighbours[port] = nb
		l.mu.Unlock()
		l.o.Log.Info("lldp neighbour", "port", port, "chassis", nb.ChassisID, "port_id", nb.PortID, "system", nb.SystemName)
		select {
		case l.heard <- struct{}{}:
		default:
		}
		return
	}
}

// complete: every port listened on has heard a neighbour (and there is one).
func (l *listen) complete() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.res.Listened) == 0 {
		return false
	}
	for _, p := range l.res.Listened {
		if _, ok := l.res.Neighbours[p]; !ok {
			return false
		}
	}
	return true
}

func (l *listen) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, c := range l.conns {
		if c != nil {
			_ = c.Close()
		}
		l.conns[p] = nil
	}
}
