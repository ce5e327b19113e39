package netboot

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// staticInventory is an inventory that never changes; it counts lookups.
type staticInventory struct {
	mu     sync.Mutex
	macs   map[string]string
	asked  []string
	missed int
}

func inventoryOf(macs ...string) *staticInventory {
	inv := &staticInventory{macs: map[string]string{}}
	for i, m := range macs {
		inv.macs[m] = fmt.Sprintf("node%d", i+1)
	}
	return inv
}

func (s *staticInventory) Lookup(mac string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, mac)
	n, ok := s.macs[mac]
	return n, ok
}

func (s *staticInventory) Missed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.missed++
}

// startProxy runs a ProxyDHCP on loopback with ephemeral ports.
func startProxy(t *testing.T, cfg Config) (*ProxyDHCP, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	cfg.ServerIP = net.IPv4(127, 0, 0, 1)
	cfg.DHCPAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	cfg.PXEAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	if cfg.Boot.ScriptURL == "" {
		cfg.Boot = testBoot
	}
	cfg.Log = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := NewProxyDHCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p, lb
}

// client is a UDP socket speaking DHCP to the proxy, as a client with an
// address does (loopback: a reply to "no address" would be a broadcast).
type client struct {
	t    *testing.T
	conn *net.UDPConn
}

func newClient(t *testing.T) *client {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, conn: c}
}

func (c *client) send(to *net.UDPAddr, m *dhcpv4.DHCPv4) {
	c.t.Helper()
	if _, err := c.conn.WriteToUDP(m.ToBytes(), to); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads the next reply; the deadline only guards against a hang.
func (c *client) recv() *dhcpv4.DHCPv4 {
	c.t.Helper()
	buf := make([]byte, 1500)
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, err := c.conn.ReadFromUDP(buf)
	if err != nil {
		c.t.Fatalf("no reply: %v", err)
	}
	m, err := dhcpv4.FromBytes(buf[:n])
	if err != nil {
		c.t.Fatalf("reply does not parse: %v", err)
	}
	return m
}

// waitStats polls the counters until cond holds (the handler runs after
// the packet is read; this waits for it, it measures nothing).
func waitStats(t *testing.T, p *ProxyDHCP, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := p.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never reached the expected state: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The whole PXE exchange over real UDP: the firmware's DISCOVER on 67 gets
// an OFFER naming the iPXE build; its ProxyDHCP REQUEST on 4011 gets the
// ACK; iPXE's DISCOVER gets the boot script URL.
func TestProxyDHCPOverUDP(t *testing.T) {
	inv := inventoryOf(testMAC.String())
	p, logs := startProxy(t, Config{Inventory: inv})
	dhcpAddr, pxeAddr := p.Addrs()
	c := newClient(t)

	disc := ovmfDiscover(t)
	c.send(dhcpAddr, disc)
	offer := c.recv()
	if offer.MessageType() != dhcpv4.MessageTypeOffer || offer.TransactionID != disc.TransactionID {
		t.Fatalf("got %v xid %v, want OFFER xid %v", offer.MessageType(), offer.TransactionID, disc.TransactionID)
	}
	if !offer.YourIPAddr.IsUnspecified() || offer.BootFileName != "snponly.efi" || !offer.ServerIPAddr.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("offer yiaddr %v file %q siaddr %v", offer.YourIPAddr, offer.BootFileName, offer.ServerIPAddr)
	}

	// The client now has its address from the site's DHCP and asks the
	// proxy on 4011.
	req, err := dhcpv4.NewRequestFromOffer(offer,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003000")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(disc.ClientArch()...)),
		dhcpv4.WithClientIP(net.IPv4(127, 0, 0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	c.send(pxeAddr, req)
	ack := c.recv()
	if ack.MessageType() != dhcpv4.MessageTypeAck || ack.BootFileName != "snponly.efi" || !ack.YourIPAddr.IsUnspecified() {
		t.Errorf("4011 answer %v file %q yiaddr %v, want ACK snponly.efi 0.0.0.0", ack.MessageType(), ack.BootFileName, ack.YourIPAddr)
	}

	// iPXE, chainloaded: the script URL, not the binary again.
	c.send(dhcpAddr, ipxeDiscover(t, 7, false))
	if got := c.recv(); got.BootFileName != testBoot.ScriptURL {
		t.Errorf("iPXE got %q, want %q", got.BootFileName, testBoot.ScriptURL)
	}

	// A REQUEST on 67 is the site DHCP's business; a DISCOVER on 4011 is
	// nobody's.
	c.send(dhcpAddr, req)
	c.send(pxeAddr, disc)
	s := waitStats(t, p, func(s Stats) bool { return s.Ignored == 2 })
	if s.Answered != 3 {
		t.Errorf("stats %+v, want 3 answered", s)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if len(inv.asked) != 3 || inv.asked[0] != testMAC.String() {
		t.Errorf("inventory asked for %v, want the client's MAC for each answered request", inv.asked)
	}
	for _, want := range []string{`node=node1`, `stage=pxe-firmware`, `file=snponly.efi`, `stage=ipxe`, `reply=ACK`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

// MACs not in the inventory, non-PXE DHCP clients and unsupported
// architectures get no answer at all.
func TestProxyDHCPSilentForOthers(t *testing.T) {
	var mu sync.Mutex
	var told []string
	p, logs := startProxy(t, Config{Inventory: inventoryOf(testMAC.String()), OnUnknown: func(mac, source string) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, mac+" from "+source)
	}})
	dhcpAddr, _ := p.Addrs()
	c := newClient(t)
	stranger := ovmfDiscover(t, dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 9}))
	osClient, _ := dhcpv4.NewDiscovery(testMAC)
	arm := ovmfDiscover(t, dhcpv4.WithOption(dhcpv4.OptClientArch(11)))
	for _, m := range []*dhcpv4.DHCPv4{stranger, osClient, arm} {
		c.send(dhcpAddr, m)
	}
	s := waitStats(t, p, func(s Stats) bool { return s.Ignored+s.Refused == 3 })
	if s.Answered != 0 || s.Ignored != 2 || s.Refused != 1 {
		t.Errorf("stats %+v, want 2 ignored (stranger, OS client), 1 refused (arm64), none answered", s)
	}
	// The known node is answered afterwards: its reply is the first packet.
	good := ovmfDiscover(t)
	c.send(dhcpAddr, good)
	if r := c.recv(); r.TransactionID != good.TransactionID {
		t.Errorf("first reply is for xid %v, want only the known node's %v", r.TransactionID, good.TransactionID)
	}
	mu.Lock()
	if len(told) != 1 || !strings.HasPrefix(told[0], "02:00:00:00:00:09 from ") {
		t.Errorf("OnUnknown told %q, want the stranger's PXE request only (not the known MAC's OS client)", told)
	}
	mu.Unlock()
	if !strings.Contains(logs.String(), "EFI ARM64") {
		t.Errorf("the refusal does not name the architecture:\n%s", logs)
	}
}

// A flood is dropped past the burst, not queued.
func TestProxyDHCPRateLimit(t *testing.T) {
	p, _ := startProxy(t, Config{Rate: 0.001, Burst: 2, AnswerUnknown: true})
	dhcpAddr, _ := p.Addrs()
	c := newClient(t)
	for i := 0; i < 6; i++ {
		c.send(dhcpAddr, ovmfDiscover(t))
	}
	s := waitStats(t, p, func(s Stats) bool { return s.Received == 6 && s.Answered+s.Dropped == 6 })
	if s.Answered != 2 || s.Dropped != 4 {
		t.Errorf("stats %+v, want 2 answered (the burst) and 4 dropped", s)
	}
}

func TestNewProxyDHCPRefuses(t *testing.T) {
	if _, err := NewProxyDHCP(Config{ServerIP: net.ParseIP("::1"), Boot: testBoot}); err == nil || !strings.Contains(err.Error(), "IPv4") {
		t.Errorf("IPv6 server IP: err = %v", err)
	}
	if _, err := NewProxyDHCP(Config{ServerIP: net.IPv4(127, 0, 0, 1)}); err == nil || !strings.Contains(err.Error(), "ScriptURL") {
		t.Errorf("no script URL: err = %v", err)
	}
	if _, err := NewProxyDHCP(Config{ServerIP: net.IPv4(127, 0, 0, 1), Boot: testBoot}); err == nil || !strings.Contains(err.Error(), "no inventory") {
		t.Errorf("no inventory, unknown MACs not answered: err = %v", err)
	}
	// A port already taken without SO_REUSEPORT is an error at start.
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, err = NewProxyDHCP(Config{ServerIP: net.IPv4(127, 0, 0, 1), Boot: testBoot, AnswerUnknown: true, DHCPAddr: busy.LocalAddr().(*net.UDPAddr),
		PXEAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}})
	if err == nil {
		t.Error("listening on a port another socket holds succeeded")
	}
}

func TestInterfaceIPv4(t *testing.T) {
	ip, err := InterfaceIPv4("lo")
	if err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("lo: %v, %v", ip, err)
	}
	if _, err := InterfaceIPv4("cure-no-such0"); err == nil {
		t.Error("unknown interface accepted")
	}
}
