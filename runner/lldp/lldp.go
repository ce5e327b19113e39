// Package lldp hears the switches a node is cabled to: it listens for LLDP
// (IEEE 802.1AB) frames on every port with link for a bounded time and
// reports, per port, the neighbour's chassis, port and system name. The
// package decodes the few TLVs it reports itself (Decode), listens on
// AF_PACKET sockets behind the Open seam (so tests feed frames) and bounds
// what it keeps. What a port heard is a fact: the
// coordinator judges it against the site's cabling map.
package lldp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
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

// TLV types of IEEE 802.1AB that Decode reads.
const (
	tlvEnd        = 0
	tlvChassisID  = 1
	tlvPortID     = 2
	tlvTTL        = 3
	tlvPortDesc   = 4
	tlvSystemName = 5
)

// Chassis and port ID subtypes whose IDs are not text (IEEE 802.1AB 8.5.2.2,
// 8.5.3.2).
const (
	chassisMAC, chassisNetwork = 4, 5
	portMAC, portNetwork       = 3, 4
)

// Decode reads one Ethernet frame carrying an LLDPDU (untagged or behind
// 802.1Q/802.1ad tags). Malformed input is an error, never a panic. The
// decoder is this package's own, a few TLVs deep: gopacket's layers
// package, which it replaces, built its lookup tables (466 KB) in the
// runner's start at every boot, under emulation a boot's critical path.
func Decode(frame []byte) (Neighbour, error) {
	if len(frame) < 14 {
		return Neighbour{}, fmt.Errorf("lldp: frame of %d bytes is shorter than an Ethernet header", len(frame))
	}
	b, etype := frame[14:], binary.BigEndian.Uint16(frame[12:14])
	for etype == 0x8100 || etype == 0x88a8 { // VLAN tags: TCI, then the inner EtherType
		if len(b) < 4 {
			return Neighbour{}, errors.New("lldp: VLAN tag cut short")
		}
		etype, b = binary.BigEndian.Uint16(b[2:4]), b[4:]
	}
	if etype != EtherType {
		return Neighbour{}, ErrNotLLDP
	}
	var n Neighbour
	for i := 0; ; i++ {
		if len(b) == 0 && i >= 3 {
			break // no End TLV, but the frame holds every mandatory TLV
		}
		if len(b) < 2 {
			return Neighbour{}, errors.New("lldp: LLDPDU ends without its End TLV")
		}
		typ, size := int(b[0]>>1), int(b[0]&1)<<8|int(b[1])
		if len(b) < 2+size {
			return Neighbour{}, fmt.Errorf("lldp: TLV type %d of %d bytes runs past the frame's %d", typ, size, len(b)-2)
		}
		v := b[2 : 2+size]
		b = b[2+size:]
		// The first three TLVs are chassis ID, port ID and TTL, in order.
		if i < 3 && typ != i+1 {
			return Neighbour{}, fmt.Errorf("lldp: TLV %d is type %d, want %d (chassis ID, port ID, TTL first)", i+1, typ, i+1)
		}
		if typ == tlvEnd {
			break
		}
		if err := n.setTLV(typ, v); err != nil {
			return Neighbour{}, err
		}
	}
	if n.ChassisID == "" || n.PortID == "" {
		return Neighbour{}, errors.New("lldp: LLDPDU without a chassis ID or port ID")
	}
	return n, nil
}

// setTLV records one TLV's value; types Decode does not read are skipped.
func (n *Neighbour) setTLV(typ int, v []byte) error {
	switch typ {
	case tlvChassisID, tlvPortID:
		if len(v) < 2 || len(v) > 256 {
			return fmt.Errorf("lldp: ID TLV (type %d) of %d bytes, want 2 to 256", typ, len(v))
		}
		if typ == tlvChassisID {
			n.ChassisIDSubtype, n.ChassisID = chassisSubtype(v[0]), idString(v[0], v[1:], chassisMAC, chassisNetwork)
		} else {
			n.PortIDSubtype, n.PortID = portSubtype(v[0]), idString(v[0], v[1:], portMAC, portNetwork)
		}
	case tlvTTL:
		if len(v) < 2 {
			return fmt.Errorf("lldp: TTL TLV of %d bytes, want 2", len(v))
		}
		n.TTL = time.Duration(binary.BigEndian.Uint16(v)) * time.Second
	case tlvPortDesc:
		n.PortDescription = clean(v)
	case tlvSystemName:
		n.SystemName = clean(v)
	}
	return nil
}

// idString is a chassis or port ID as text: a MAC as aa:bb:..., a network
// address as an IP, anything else as the (cleaned) bytes sent.
func idString(subtype byte, id []byte, mac, network byte) string {
	switch subtype {
	case mac:
		if len(id) == 6 {
			return net.HardwareAddr(id).String()
		}
	case network:
		return networkAddr(id)
	}
	return clean(id)
}

// networkAddr is an IANA address family byte then the address (RFC 2922).
func networkAddr(b []byte) string {
	if len(b) == 5 && b[0] == 1 || len(b) == 17 && b[0] == 2 {
		return net.IP(b[1:]).String()
	}
	return clean(b)
}

// chassisSubtypes and portSubtypes name the ID subtypes (IEEE 802.1AB
// tables 8-2 and 8-3), by subtype number.
var (
	chassisSubtypes = []string{"reserved", "chassis-component", "interface-alias", "port-component", "mac", "network-address", "interface-name", "local"}
	portSubtypes    = []string{"reserved", "interface-alias", "port-component", "mac", "network-address", "interface-name", "agent-circuit-id", "local"}
)

func chassisSubtype(s byte) string { return subtypeName(chassisSubtypes, s) }

func portSubtype(s byte) string { return subtypeName(portSubtypes, s) }

func subtypeName(names []string, s byte) string {
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("subtype-%d", s)
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
