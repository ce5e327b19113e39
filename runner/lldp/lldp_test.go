package lldp_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/lldp"
	"github.com/cure-oss/cure/runner/lldp/lldptest"
	"github.com/cure-oss/cure/tools/testenv"
)

var leafA = lldptest.Switch{
	ChassisMAC: net.HardwareAddr{0x0c, 0x42, 0xa1, 0x00, 0x00, 0x01},
	Port:       "Ethernet12", PortDesc: "to node7 eth0", SystemName: "leaf-r12-a",
}

func mustFrame(t testing.TB, sw lldptest.Switch) []byte {
	t.Helper()
	f, err := lldptest.Frame(sw)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDecode(t *testing.T) {
	n, err := lldp.Decode(mustFrame(t, leafA))
	if err != nil {
		t.Fatal(err)
	}
	want := lldp.Neighbour{ChassisID: "0c:42:a1:00:00:01", ChassisIDSubtype: "mac", PortID: "Ethernet12", PortIDSubtype: "interface-name",
		PortDescription: "to node7 eth0", SystemName: "leaf-r12-a", TTL: 120 * time.Second}
	if n != want {
		t.Errorf("Decode = %+v\nwant      %+v", n, want)
	}
	// An IPv4 frame is not an LLDPDU; a cut LLDPDU is an error.
	ipv4 := append(append([]byte{}, mustFrame(t, leafA)[:12]...), 0x08, 0x00, 0x45, 0, 0, 20)
	if _, err := lldp.Decode(ipv4); err == nil {
		t.Error("an IPv4 frame decoded as LLDP")
	}
	f := mustFrame(t, leafA)
	if _, err := lldp.Decode(f[:20]); err == nil {
		t.Error("a truncated LLDPDU decoded")
	}
	// Control bytes in a switch's strings never reach the report as such.
	sw := leafA
	sw.SystemName = "leaf\x1b[31m\nevil"
	if n, err := lldp.Decode(mustFrame(t, sw)); err != nil || n.SystemName != "leaf?[31m?evil" {
		t.Errorf("Decode with control bytes = %q, %v", n.SystemName, err)
	}
}

// fakeConn feeds frames, then blocks until its deadline or Close.
type fakeConn struct {
	frames [][]byte
	closed chan struct{}
}

func newFake(frames ...[]byte) *fakeConn {
	return &fakeConn{frames: frames, closed: make(chan struct{})}
}

func (c *fakeConn) Read(buf []byte, deadline time.Time) (int, error) {
	if len(c.frames) > 0 {
		f := c.frames[0]
		c.frames = c.frames[1:]
		return copy(buf, f), nil
	}
	select {
	case <-c.closed:
		return 0, errors.New("closed")
	case <-time.After(time.Until(deadline)):
		return 0, errors.New("deadline")
	}
}

func (c *fakeConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

func TestListenFedFrames(t *testing.T) {
	leafB := leafA
	leafB.SystemName, leafB.Port = "leaf-r12-b", "Ethernet3"
	conns := map[string]*fakeConn{
		"eth0": newFake([]byte("junk"), mustFrame(t, leafA)),
		"eth1": newFake(mustFrame(t, leafB)),
	}
	open := func(p string) (lldp.Conn, error) {
		if c, ok := conns[p]; ok {
			return c, nil
		}
		return nil, errors.New("no such port")
	}
	ports := func() ([]string, error) { return []string{"eth1", "eth0", "eth9"}, nil }

	// Every port that opened hears a neighbour: the listen ends early.
	res := lldp.Listen(context.Background(), lldp.Options{Window: 10 * time.Second, Ports: ports, Open: open})
	if res.Waited > 5*time.Second {
		t.Errorf("listen waited %s with every port heard: it should stop early", res.Waited)
	}
	if !slices.Equal(res.Listened, []string{"eth0", "eth1"}) {
		t.Errorf("listened on %v, want eth0 eth1 (eth9 failed to open)", res.Listened)
	}
	if res.Neighbours["eth0"].SystemName != "leaf-r12-a" || res.Neighbours["eth1"].PortID != "Ethernet3" || res.Neighbours["eth0"].Port != "eth0" {
		t.Errorf("neighbours = %+v", res.Neighbours)
	}

	// A silent port keeps the listen to its window, and no longer.
	conns = map[string]*fakeConn{"eth0": newFake(mustFrame(t, leafA)), "eth1": newFake()}
	start := time.Now()
	res = lldp.Listen(context.Background(), lldp.Options{Window: 300 * time.Millisecond, Ports: ports, Open: open, Rescan: 50 * time.Millisecond})
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("listen with a silent port took %s, want its 300ms window", d)
	}
	if _, ok := res.Neighbours["eth1"]; ok || len(res.Neighbours) != 1 {
		t.Errorf("neighbours = %+v, want eth0's only", res.Neighbours)
	}

	// The inventory carries the facts: heard, listened-but-silent.
	inv := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "eth0"}, {Name: "eth1"}, {Name: "eth2"}}}
	res.Apply(inv, 300)
	if inv.GetLldpWindowMs() != 300 || inv.Nics[0].GetLldp().GetSystemName() != "leaf-r12-a" || !inv.Nics[1].GetLldpListened() ||
		inv.Nics[1].GetLldp() != nil || inv.Nics[2].GetLldpListened() {
		t.Errorf("applied inventory = %v", inv)
	}

	// No window: nothing is opened.
	if res := lldp.Listen(context.Background(), lldp.Options{Ports: ports, Open: func(string) (lldp.Conn, error) {
		t.Error("opened a port with no window")
		return nil, errors.New("no")
	}}); len(res.Listened) != 0 {
		t.Errorf("listened %v with no window", res.Listened)
	}
}

func TestLinkedPorts(t *testing.T) {
	root := t.TempDir()
	mk := func(name, typ, carrier string, device bool) {
		d := filepath.Join(root, "sys", "class", "net", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "type"), []byte(typ+"\n"), 0o644)
		if carrier != "" {
			os.WriteFile(filepath.Join(d, "carrier"), []byte(carrier+"\n"), 0o644)
		}
		if device {
			os.MkdirAll(filepath.Join(d, "device"), 0o755)
		}
	}
	mk("lo", "772", "1", false)
	mk("enp1s0", "1", "1", true)
	mk("enp2s0", "1", "0", true)
	mk("enp3s0", "1", "", true) // down: reading carrier fails
	mk("br0", "1", "1", false)
	mk("ib0", "32", "1", true)
	mk("enp4s0", "1", "1", true)
	got, err := lldp.LinkedPorts(root)
	if err != nil || !slices.Equal(got, []string{"enp1s0", "enp4s0"}) {
		t.Errorf("LinkedPorts = %v, %v; want enp1s0 enp4s0", got, err)
	}
}

func FuzzLLDPDecode(f *testing.F) {
	f.Add(mustFrame(f, leafA))
	sw := leafA
	sw.PortDesc, sw.SystemName = "", ""
	f.Add(mustFrame(f, sw))
	f.Add([]byte{})
	f.Add(append(mustFrame(f, leafA)[:14], 0x02, 0x07, 0x04))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := lldp.Decode(b)
		if err != nil {
			return
		}
		for _, s := range []string{n.ChassisID, n.PortID, n.SystemName, n.PortDescription} {
			if len(s) > 4*255 {
				t.Errorf("field of %d bytes passed the bound", len(s))
			}
			for _, r := range s {
				if r < 0x20 || r == 0x7f {
					t.Errorf("control character %q kept in %q", r, s)
				}
			}
		}
		if n.ChassisID == "" || n.PortID == "" {
			t.Errorf("decoded without chassis or port: %+v", n)
		}
	})
}

// TestLLDPNeighboursReported: a Go sender announces a switch on one end of
// a veth pair in a network namespace; the runner's real listener (AF_PACKET
// socket bound to the other end, ETH_P_LLDP) hears it, and the inventory
// the runner reports carries it on that port.
func TestLLDPNeighboursReported(t *testing.T) {
	testenv.RequireRoot(t, "the test builds a network namespace and opens AF_PACKET sockets")
	site := lldptest.NewSite(t)
	site.Announce(t, leafA, 100*time.Millisecond)
	open := func(p string) (c lldp.Conn, err error) {
		err = site.In(func() error { c, err = lldp.OpenPacket(p); return err })
		return c, err
	}
	res := lldp.Listen(context.Background(), lldp.Options{Window: 5 * time.Second, Open: open,
		Ports: func() ([]string, error) { return []string{site.NodePort}, nil }})
	nb, ok := res.Neighbours[site.NodePort]
	if !ok {
		t.Fatalf("no neighbour heard on %s in %s (listened %v)", site.NodePort, res.Waited, res.Listened)
	}
	if nb.SystemName != "leaf-r12-a" || nb.PortID != "Ethernet12" || nb.ChassisID != "0c:42:a1:00:00:01" || nb.PortDescription != "to node7 eth0" {
		t.Errorf("heard %+v", nb)
	}
	if res.Waited > 3*time.Second {
		t.Errorf("listen took %s though the only port heard its switch at once", res.Waited)
	}
	inv := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: site.NodePort}}}
	res.Apply(inv, 5000)
	if got := inv.GetNics()[0].GetLldp(); got.GetSystemName() != "leaf-r12-a" || got.GetPortId() != "Ethernet12" || got.GetChassisId() != "0c:42:a1:00:00:01" {
		t.Errorf("inventory port %s: lldp = %v", site.NodePort, got)
	}
	t.Logf("heard %s port %s on %s after %s", nb.SystemName, nb.PortID, site.NodePort, res.Waited.Round(time.Millisecond))
}

// TestListenEndsOnCancel: the boot's default listen (no cure.lldp=) is
// ended when the inventory is done; a reader blocked on a real AF_PACKET
// socket that heard nothing must let go at once, so the boot pays nothing.
func TestListenEndsOnCancel(t *testing.T) {
	testenv.RequireRoot(t, "the test builds a network namespace and opens AF_PACKET sockets")
	site := lldptest.NewSite(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	res := lldp.Listen(ctx, lldp.Options{Window: lldp.MaxWindow,
		Ports: func() ([]string, error) { return []string{site.NodePort}, nil },
		Open: func(p string) (c lldp.Conn, err error) {
			err = site.In(func() error { c, err = lldp.OpenPacket(p); return err })
			return c, err
		}})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("listen took %s after its cancel at 200ms", d)
	}
	if !slices.Equal(res.Listened, []string{site.NodePort}) || len(res.Neighbours) != 0 {
		t.Errorf("result %+v, want %s listened, nothing heard", res, site.NodePort)
	}
}

// rawLLDP is an Ethernet frame (EtherType path etypes, then 0x88cc) with
// the given TLVs, each as type, value.
func rawLLDP(etypes []uint16, tlvs ...any) []byte {
	f := []byte{0x01, 0x80, 0xc2, 0, 0, 0x0e, 0x0c, 0x42, 0xa1, 0, 0, 1}
	for _, e := range etypes { // a tag: its EtherType, then a TCI
		f = append(f, byte(e>>8), byte(e), 0x00, 0x64)
	}
	f = append(f, 0x88, 0xcc)
	for i := 0; i < len(tlvs); i += 2 {
		typ, v := tlvs[i].(int), tlvs[i+1].([]byte)
		f = append(f, byte(typ<<1)|byte(len(v)>>8), byte(len(v)))
		f = append(f, v...)
	}
	return f
}

// Decode reads tagged frames, network-address and MAC IDs, frames without
// an End TLV, and refuses TLVs out of order or running past the frame.
func TestDecodeRaw(t *testing.T) {
	chassis, port, ttl := []byte{5, 1, 10, 0, 0, 7}, []byte{3, 0xaa, 0xbb, 0xcc, 0, 0, 1}, []byte{0, 30}
	want := lldp.Neighbour{ChassisID: "10.0.0.7", ChassisIDSubtype: "network-address", PortID: "aa:bb:cc:00:00:01", PortIDSubtype: "mac",
		SystemName: "spine-1", TTL: 30 * time.Second}
	for name, f := range map[string][]byte{
		"untagged":       rawLLDP(nil, 1, chassis, 2, port, 3, ttl, 5, []byte("spine-1"), 0, []byte{}),
		"802.1Q":         rawLLDP([]uint16{0x8100}, 1, chassis, 2, port, 3, ttl, 5, []byte("spine-1"), 0, []byte{}),
		"QinQ":           rawLLDP([]uint16{0x88a8, 0x8100}, 1, chassis, 2, port, 3, ttl, 5, []byte("spine-1"), 0, []byte{}),
		"no End TLV":     rawLLDP(nil, 1, chassis, 2, port, 3, ttl, 5, []byte("spine-1")),
		"unknown TLV":    rawLLDP(nil, 1, chassis, 2, port, 3, ttl, 127, []byte{0, 0x80, 0xc2, 1, 0, 1}, 5, []byte("spine-1"), 0, []byte{}),
		"padded after 0": append(rawLLDP(nil, 1, chassis, 2, port, 3, ttl, 5, []byte("spine-1"), 0, []byte{}), 0, 0, 0, 0),
	} {
		if n, err := lldp.Decode(f); err != nil || n != want {
			t.Errorf("%s: Decode = %+v, %v\nwant %+v", name, n, err, want)
		}
	}
	for name, f := range map[string][]byte{
		"port before chassis": rawLLDP(nil, 2, port, 1, chassis, 3, ttl, 0, []byte{}),
		"no TTL":              rawLLDP(nil, 1, chassis, 2, port, 0, []byte{}),
		"TLV past the end":    rawLLDP(nil, 1, chassis, 2, port, 3, ttl, 5, []byte("spine-1"))[:40],
		"short chassis ID":    rawLLDP(nil, 1, []byte{4}, 2, port, 3, ttl, 0, []byte{}),
		"cut VLAN tag":        {0x01, 0x80, 0xc2, 0, 0, 0x0e, 0x0c, 0x42, 0xa1, 0, 0, 1, 0x81, 0x00, 0},
	} {
		if n, err := lldp.Decode(f); err == nil {
			t.Errorf("%s: decoded %+v", name, n)
		}
	}
}
