// Package lldptest builds LLDP frames the way a switch sends them (with
// gopacket's serializer) and a network namespace where a Go sender
// announces a switch on one end of a veth pair, so tests hear it through
// the runner's real AF_PACKET listener on the other end.
package lldptest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// Switch is what a sender announces.
type Switch struct {
	ChassisMAC net.HardwareAddr // chassis ID (subtype MAC)
	Port       string           // port ID (subtype interface name)
	PortDesc   string
	SystemName string
	TTL        uint16
}

// Frame is sw's LLDPDU in an Ethernet frame to the nearest-bridge group.
func Frame(sw Switch) ([]byte, error) {
	ttl := sw.TTL
	if ttl == 0 {
		ttl = 120
	}
	var vals []layers.LinkLayerDiscoveryValue
	if sw.PortDesc != "" {
		vals = append(vals, layers.LinkLayerDiscoveryValue{Type: layers.LLDPTLVPortDescription, Length: uint16(len(sw.PortDesc)), Value: []byte(sw.PortDesc)})
	}
	if sw.SystemName != "" {
		vals = append(vals, layers.LinkLayerDiscoveryValue{Type: layers.LLDPTLVSysName, Length: uint16(len(sw.SystemName)), Value: []byte(sw.SystemName)})
	}
	eth := &layers.Ethernet{SrcMAC: sw.ChassisMAC, DstMAC: net.HardwareAddr{0x01, 0x80, 0xc2, 0, 0, 0x0e}, EthernetType: layers.EthernetTypeLinkLayerDiscovery}
	l := &layers.LinkLayerDiscovery{
		ChassisID: layers.LLDPChassisID{Subtype: layers.LLDPChassisIDSubTypeMACAddr, ID: sw.ChassisMAC},
		PortID:    layers.LLDPPortID{Subtype: layers.LLDPPortIDSubtypeIfaceName, ID: []byte(sw.Port)},
		TTL:       ttl,
		Values:    vals,
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, eth, l); err != nil {
		return nil, fmt.Errorf("serializing LLDP frame: %w", err)
	}
	return buf.Bytes(), nil
}

// Site is a network namespace with a veth pair: the node's port (NodePort)
// and the switch's (SwitchPort), both up.
type Site struct {
	NS         string
	NodePort   string
	SwitchPort string
}

// NewSite makes the namespace (removed at the test's end). The caller
// checked for root (tools/testenv.RequireRoot).
func NewSite(t testing.TB) *Site {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("needs ip(8) (iproute2): %v", err)
	}
	s := &Site{NS: fmt.Sprintf("cure-lldp-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000), NodePort: "eth0", SwitchPort: "swp1"}
	ip(t, "netns", "add", s.NS)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", s.NS).CombinedOutput(); err != nil {
			t.Logf("ip netns delete %s: %v: %s", s.NS, err, out)
		}
	})
	for _, c := range [][]string{
		{"-n", s.NS, "link", "set", "lo", "up"},
		{"-n", s.NS, "link", "add", s.NodePort, "type", "veth", "peer", "name", s.SwitchPort},
		{"-n", s.NS, "link", "set", s.NodePort, "up"},
		{"-n", s.NS, "link", "set", s.SwitchPort, "up"},
	} {
		ip(t, c...)
	}
	return s
}

func ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// In runs fn on an OS thread moved into the site's namespace: sockets fn
// opens live there and stay usable from any goroutine. The thread is
// never handed back to the runtime (it ends with the goroutine).
func (s *Site) In(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", s.NS))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", s.NS, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Announce sends sw's LLDPDU on the switch port every interval until the
// returned stop is called (a switch sends every 30 s; tests use less).
func (s *Site) Announce(t testing.TB, sw Switch, interval time.Duration) (stop func()) {
	t.Helper()
	var fd int
	err := s.In(func() error {
		var err error
		fd, err = sender(s.SwitchPort)
		return err
	})
	if err != nil {
		t.Fatalf("sender socket on %s: %v", s.SwitchPort, err)
	}
	return announce(t, fd, sw, interval)
}

// AnnounceOn is Announce on an interface of the calling thread's network
// namespace (a QEMU node's tap device: what is sent on it reaches the node).
func AnnounceOn(t testing.TB, iface string, sw Switch, interval time.Duration) (stop func()) {
	t.Helper()
	fd, err := sender(iface)
	if err != nil {
		t.Fatalf("sender socket on %s: %v", iface, err)
	}
	return announce(t, fd, sw, interval)
}

// sender is a raw AF_PACKET socket bound to iface, for whole frames.
func sender(iface string) (int, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: 0, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func announce(t testing.TB, fd int, sw Switch, interval time.Duration) (stop func()) {
	frame, err := Frame(sw)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			// A tap whose QEMU is not attached yet refuses frames: keep on.
			_, _ = unix.Write(fd, frame)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			unix.Close(fd)
		})
	}
	t.Cleanup(stop)
	return stop
}
