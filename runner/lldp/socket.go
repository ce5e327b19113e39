package lldp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lldpMulticast is the nearest-bridge group address LLDPDUs are sent to;
// the port must accept it (NICs filter multicast they were not asked for).
var lldpMulticast = [8]byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e}

// htons: AF_PACKET takes the protocol in network byte order.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetConn is an AF_PACKET socket bound to one interface and to LLDP's
// EtherType, non-blocking under Go's poller so a deadline or a Close ends
// a Read.
type packetConn struct {
	f *os.File
}

// OpenPacket opens port's LLDP frame source: a raw AF_PACKET socket bound
// to the interface with ETH_P_LLDP, member of the LLDP multicast group.
// Needs CAP_NET_RAW (the runner is root).
func OpenPacket(port string) (Conn, error) {
	ifi, err := net.InterfaceByName(port)
	if err != nil {
		return nil, fmt.Errorf("lldp: interface %s: %w", port, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(EtherType)))
	if err != nil {
		return nil, fmt.Errorf("lldp: AF_PACKET socket for %s: %w", port, err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(EtherType), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lldp: binding to %s: %w", port, err)
	}
	mreq := &unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_MULTICAST, Alen: 6, Address: lldpMulticast}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lldp: joining the LLDP multicast group on %s: %w", port, err)
	}
	return &packetConn{f: os.NewFile(uintptr(fd), "lldp-"+port)}, nil
}

// Read returns the next frame the port received (frames the node sent
// itself, PACKET_OUTGOING, are skipped).
func (c *packetConn) Read(buf []byte, deadline time.Time) (int, error) {
	if err := c.f.SetReadDeadline(deadline); err != nil {
		return 0, fmt.Errorf("lldp: read deadline: %w", err)
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("lldp: raw conn: %w", err)
	}
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil {
			return 0, fmt.Errorf("lldp: read: %w", err)
		}
		if rerr != nil {
			return 0, fmt.Errorf("lldp: recvfrom: %w", rerr)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return n, nil
	}
}

func (c *packetConn) Close() error { return c.f.Close() }

// LinkedPorts lists the Ethernet interfaces under sysRoot/sys/class/net with
// carrier: the physical ports a cable with a live far end plugs into
// (loopback and virtual devices are left out).
func LinkedPorts(sysRoot string) ([]string, error) {
	dir := filepath.Join(sysRoot, "sys", "class", "net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lldp: listing interfaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		base := filepath.Join(dir, name)
		if t, err := os.ReadFile(filepath.Join(base, "type")); err != nil || strings.TrimSpace(string(t)) != "1" {
			continue // ARPHRD_ETHER only
		}
		if c, err := os.ReadFile(filepath.Join(base, "carrier")); err != nil || strings.TrimSpace(string(c)) != "1" {
			continue // down, or no carrier (reading carrier of a down link fails)
		}
		if !physical(base) {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// physical: a device with a bus behind it (its device link); bridges,
// bonds, veths and tunnels have none.
func physical(base string) bool {
	_, err := os.Stat(filepath.Join(base, "device"))
	return err == nil
}
