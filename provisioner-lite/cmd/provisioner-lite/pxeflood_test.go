package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/pin/tftp/v3"
	"golang.org/x/sys/unix"

	"github.com/cure-oss/cure/tools/testenv"
)

// The PXE site of the flood tests: the coordinator's namespace holds pxe0
// (the provisioning network; its default route points at the peer, as at
// a router); the peer's namespace holds node0 with the known node's MAC and
// address, and a second address the attacker owns. The attacker also
// forges any source address it likes through a raw socket.
const (
	pxeCoordIP    = "10.78.0.1"
	pxeNodeIP     = "10.78.0.2"
	pxeAttackerIP = "10.78.0.3"
	pxeNodeMAC    = "52:54:00:c0:de:01"
)

type pxeSite struct {
	coord, peer string // namespace names
	logPath     string
	cmd         *exec.Cmd
	exited      chan error
	builds      map[string][]byte
	stopOnce    sync.Once
}

// startPXESite builds the namespaces and starts the real coordinator (this
// binary's main, see TestMain) inside the coordinator's one with the
// proxy DHCP and TFTP on pxe0, one node in its inventory.
func startPXESite(t *testing.T) *pxeSite {
	t.Helper()
	testenv.RequireRoot(t, "the test builds network namespaces and sends forged packets")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) (iproute2)")
	}
	dir := t.TempDir()
	id := fmt.Sprintf("%d-%s", os.Getpid(), strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))[:6])
	s := &pxeSite{coord: "cure-pxec-" + id, peer: "cure-pxep-" + id, logPath: filepath.Join(dir, "coordinator.log"), exited: make(chan error, 1)}
	for _, ns := range []string{s.coord, s.peer} {
		ipRun(t, "netns", "add", ns)
		t.Cleanup(func() { deleteNamespace(t, ns) })
	}
	for _, c := range [][]string{
		{"-n", s.coord, "link", "set", "lo", "up"},
		{"-n", s.peer, "link", "set", "lo", "up"},
		{"-n", s.coord, "link", "add", "pxe0", "type", "veth", "peer", "name", "node0", "netns", s.peer},
		{"-n", s.coord, "addr", "add", pxeCoordIP + "/16", "dev", "pxe0"},
		{"-n", s.coord, "link", "set", "pxe0", "up"},
		{"-n", s.coord, "route", "add", "default", "via", pxeNodeIP},
		{"-n", s.peer, "link", "set", "node0", "address", pxeNodeMAC},
		{"-n", s.peer, "addr", "add", pxeNodeIP + "/16", "dev", "node0"},
		{"-n", s.peer, "addr", "add", pxeAttackerIP + "/16", "dev", "node0"},
		{"-n", s.peer, "link", "set", "node0", "up"},
	} {
		ipRun(t, c...)
	}
	// The iPXE builds: Debian's where installed, else stand-ins of their size.
	ipxe := filepath.Join(dir, "ipxe")
	if err := os.Mkdir(ipxe, 0o755); err != nil {
		t.Fatal(err)
	}
	s.builds = map[string][]byte{}
	for name, size := range map[string]int{"snponly.efi": 173792, "undionly.kpxe": 74213} {
		b, err := os.ReadFile(filepath.Join("/usr/lib/ipxe", name))
		if err != nil {
			b = make([]byte, size)
			rand.Read(b)
		}
		s.builds[name] = b
		if err := os.WriteFile(filepath.Join(ipxe, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nodes := filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(nodes, []byte(`nodes:
  - id: n1
    bmc: {url: "https://10.79.0.1", username: admin, password: pw, insecure: true}
    macs: ["`+pxeNodeMAC+`"]
    sku: qemu-nvme
`), 0o600); err != nil {
		t.Fatal(err)
	}
	lf, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--state-dir", filepath.Join(dir, "state"), "--manifests", "../../../manifests/examples", "--nodes", nodes,
		"--image-dir", filepath.Join(dir, "no-image"), "--advertise", pxeCoordIP,
		"--http-listen", pxeCoordIP + ":8080", "--grpc-listen", pxeCoordIP + ":8443", "--metrics-listen=",
		"--pxe-interface", "pxe0", "--proxy-dhcp", "--ipxe-dir", ipxe}
	s.cmd = exec.Command("ip", "netns", "exec", s.coord, os.Args[0], "-test.run=^$")
	s.cmd.Env = append(os.Environ(), "CURE_TEST_MAIN_ARGS="+strings.Join(args, "\x1f"))
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait(); lf.Close() }()
	t.Cleanup(func() {
		log := s.stop(t)
		if t.Failed() {
			t.Logf("--- coordinator log, last 8 KiB ---\n%s", log[max(0, len(log)-8192):])
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		log := s.log(t)
		if strings.Contains(log, "TFTP serving iPXE builds") && strings.Contains(log, "proxy DHCP serving") {
			return s
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			t.Fatalf("the coordinator exited at start (%v):\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator did not start serving PXE:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *pxeSite) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stop ends the coordinator as an operator does (SIGINT), so its refusal
// summaries are written, and returns its log.
func (s *pxeSite) stop(t *testing.T) string {
	t.Helper()
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-s.exited:
			if err != nil {
				t.Errorf("coordinator: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
			t.Errorf("the coordinator did not stop on SIGINT")
		}
	})
	return s.log(t)
}

func ipRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// deleteNamespace kills what still runs in ns (only this test's
// processes can be there) and deletes it with its devices.
func deleteNamespace(t *testing.T, ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			// This process shows up too when a thread of it entered ns.
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
		t.Logf("ip netns delete %s: %v: %s", ns, err, out)
	}
}

// inNetns runs fn on an OS thread moved into namespace ns: sockets fn
// opens live in ns, and stay usable from anywhere. The thread is never
// handed back to the runtime (it ends with the goroutine).
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// forger sends UDP packets with any source address, through a raw socket
// on node0 in the peer's namespace.
type forger struct {
	fd   int
	sent atomic.Int64
}

func newForger(t *testing.T, s *pxeSite) *forger {
	t.Helper()
	f := &forger{}
	err := inNetns(s.peer, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
			return err
		}
		if err := unix.BindToDevice(fd, "node0"); err != nil {
			return err
		}
		f.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("raw socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(f.fd) })
	return f
}

// send writes one IPv4/UDP packet; the kernel fills in the IP checksum,
// and a zero UDP checksum means none.
func (f *forger) send(src, dst netip.AddrPort, payload []byte) error {
	p := make([]byte, 28, 28+len(payload))
	p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(p[2:], uint16(28+len(payload)))
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:16], s4[:])
	copy(p[16:20], d4[:])
	binary.BigEndian.PutUint16(p[20:], src.Port())
	binary.BigEndian.PutUint16(p[22:], dst.Port())
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	p = append(p, payload...)
	if err := unix.Sendto(f.fd, p, 0, &unix.SockaddrInet4{Addr: d4}); err != nil {
		return err
	}
	f.sent.Add(1)
	return nil
}

// flood sends packets from next, about 2,000 a second, until the returned
// stop is called (or the test ends).
func (f *forger) flood(t *testing.T, next func(i int) (src, dst netip.AddrPort, payload []byte)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			src, dst, b := next(i)
			if err := f.send(src, dst, b); err != nil && !errors.Is(err, unix.ENOBUFS) {
				t.Errorf("forged packet %d: %v", i, err)
				return
			}
			if i%20 == 19 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop) // before the socket closes
	return stop
}

// waitSent waits until the flood is under way.
func (f *forger) waitSent(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for f.sent.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the flood sent %d packets, want %d", f.sent.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func randN(n int64) int64 {
	v, _ := rand.Int(rand.Reader, big.NewInt(n))
	return v.Int64()
}

// spoofedSource is a forged source: an address off the segment (whose
// answers leave through the router) or one on it that nobody holds, and a
// random port.
func spoofedSource(i int) netip.AddrPort {
	port := uint16(1024 + randN(64000))
	if i%3 == 0 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 78, 1, byte(10 + i%150)}), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(100 + randN(100)), byte(randN(256)), byte(1 + randN(254))}), port)
}

func randomMAC() net.HardwareAddr {
	m := make(net.HardwareAddr, 6)
	rand.Read(m)
	m[0] = m[0]&^1 | 2 // unicast, locally administered: never the known node's
	return m
}

var pxeOptions = []dhcpv4.Modifier{
	dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016")),
	dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)),
	dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, bytes.Repeat([]byte{0xc0}, 16)...)),
}

// knownNodeBoots is the known node's PXE boot up to iPXE, as firmware does
// it, each step within the client's usual retries: DISCOVER (4 tries of
// 4 s) answered with the iPXE build, the ProxyDHCP REQUEST on 4011 (4
// tries) acknowledged, the build read whole over TFTP by two clients
// (pin/tftp, and curl where installed), then iPXE's DISCOVER answered with
// the boot script.
func knownNodeBoots(t *testing.T, s *pxeSite) {
	t.Helper()
	start := time.Now()
	step := func(what string) { t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond)) }
	var dc *nclient4.Client
	if err := inNetns(s.peer, func() (err error) {
		dc, err = nclient4.New("node0", nclient4.WithTimeout(4*time.Second), nclient4.WithRetry(4))
		return err
	}); err != nil {
		t.Fatalf("DHCP client on node0: %v", err)
	}
	defer dc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	offer, err := dc.DiscoverOffer(ctx, pxeOptions...)
	if err != nil {
		t.Fatalf("the known node's DISCOVER was not answered within 4 tries: %v", err)
	}
	if offer.BootFileName != "snponly.efi" || !offer.ServerIPAddr.Equal(net.ParseIP(pxeCoordIP)) || !offer.YourIPAddr.IsUnspecified() {
		t.Fatalf("OFFER file %q siaddr %v yiaddr %v", offer.BootFileName, offer.ServerIPAddr, offer.YourIPAddr)
	}
	step("OFFER")
	// The node has its address (from the site's DHCP server) and asks the
	// boot server on 4011.
	var uc *net.UDPConn
	if err := inNetns(s.peer, func() (err error) {
		uc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(pxeNodeIP)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	req, err := dhcpv4.NewRequestFromOffer(offer, append(pxeOptions, dhcpv4.WithClientIP(net.ParseIP(pxeNodeIP)))...)
	if err != nil {
		t.Fatal(err)
	}
	ack := exchange(t, uc, &net.UDPAddr{IP: net.ParseIP(pxeCoordIP), Port: 4011}, req)
	if ack.MessageType() != dhcpv4.MessageTypeAck || ack.BootFileName != "snponly.efi" {
		t.Fatalf("4011: %v file %q, want ACK snponly.efi", ack.MessageType(), ack.BootFileName)
	}
	step("4011 ACK")
	if err := inNetns(s.peer, func() error {
		c, err := tftp.NewClient(pxeCoordIP + ":69")
		if err != nil {
			return err
		}
		c.SetBlockSize(1468)
		c.RequestTSize(true)
		wt, err := c.Receive(offer.BootFileName, "octet")
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if _, err := wt.WriteTo(&b); err != nil {
			return err
		}
		if !bytes.Equal(b.Bytes(), s.builds["snponly.efi"]) {
			return fmt.Errorf("read %d bytes, want the build's %d", b.Len(), len(s.builds["snponly.efi"]))
		}
		return nil
	}); err != nil {
		t.Fatalf("TFTP read of snponly.efi: %v", err)
	}
	step("TFTP read")
	if _, err := exec.LookPath("curl"); err == nil {
		out := filepath.Join(t.TempDir(), "undionly.kpxe")
		cmd := exec.Command("ip", "netns", "exec", s.peer, "curl", "--silent", "--show-error", "--max-time", "120",
			"--tftp-blksize", "1468", "--interface", pxeNodeIP, "-o", out, "tftp://"+pxeCoordIP+"/undionly.kpxe")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("curl tftp: %v: %s", err, b)
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, s.builds["undionly.kpxe"]) {
			t.Fatalf("curl read %d bytes, want the build's %d", len(got), len(s.builds["undionly.kpxe"]))
		}
	} else {
		t.Log("curl not installed: the second TFTP client is skipped")
	}
	step("curl TFTP read")
	// iPXE, chainloaded, asks again and gets the boot script's URL.
	ipxeOffer, err := dc.DiscoverOffer(ctx, append(pxeOptions, dhcpv4.WithUserClass("iPXE", false))...)
	if err != nil {
		t.Fatalf("iPXE's DISCOVER was not answered within 4 tries: %v", err)
	}
	if want := "http://" + pxeCoordIP + ":8080/boot.ipxe"; ipxeOffer.BootFileName != want {
		t.Fatalf("iPXE got %q, want %q", ipxeOffer.BootFileName, want)
	}
	step("iPXE OFFER")
}

// exchange sends m to to and returns the first reply of its transaction,
// sending again after each 4 s without one, 4 tries in all.
func exchange(t *testing.T, c *net.UDPConn, to *net.UDPAddr, m *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()
	buf := make([]byte, 2048)
	for try := 0; try < 4; try++ {
		if _, err := c.WriteToUDP(m.ToBytes(), to); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(4 * time.Second))
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				break
			}
			if r, err := dhcpv4.FromBytes(buf[:n]); err == nil && r.TransactionID == m.TransactionID {
				return r
			}
		}
	}
	t.Fatalf("no answer to %v on %v within 4 tries", m.MessageType(), to)
	return nil
}

var summaryRefused = regexp.MustCompile(`refused=(\d+)`)

// summarised checks that refusals on listener were written as a few lines
// (at least one summary counting more than one refusal), not one each.
func summarised(t *testing.T, log, listener string, flood int64) {
	t.Helper()
	var lines, counted int
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "listener="+listener) {
			continue
		}
		lines++
		if m := summaryRefused.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			counted += n
		}
	}
	if lines == 0 || counted == 0 {
		t.Errorf("no summary of %s refusals in the log", listener)
	}
	if lines > 40 {
		t.Errorf("%d forged packets wrote %d %s refusal lines, want a summary", flood, lines, listener)
	}
	if n := strings.Count(log, "\n"); n > 100 {
		t.Errorf("%d forged packets made the coordinator write %d lines", flood, n)
	}
	t.Logf("%d forged packets: %d %s refusal lines counting %d refusals; %d log lines in all", flood, lines, listener, counted, strings.Count(log, "\n"))
}

// TestTFTPSlotsNeedAck: forged read requests (of the real builds, and of
// names not served) from addresses that never see the answer, a couple of
// thousand a second, while a known node PXE boots: its TFTP reads complete,
// because a request holds no transfer slot until its first packet is
// acknowledged; the refusals are summarised in the log.
func TestTFTPSlotsNeedAck(t *testing.T) {
	s := startPXESite(t)
	f := newForger(t, s)
	server := netip.MustParseAddrPort(pxeCoordIP + ":69")
	attacker := netip.MustParseAddr(pxeAttackerIP)
	names := []string{"snponly.efi", "undionly.kpxe", "pxelinux.0", "../../etc/shadow", "grub/x86_64-efi/core.efi"}
	stop := f.flood(t, func(i int) (netip.AddrPort, netip.AddrPort, []byte) {
		src := spoofedSource(i)
		if i%10 == 0 { // the attacker's own address too: it receives, and never acknowledges
			src = netip.AddrPortFrom(attacker, src.Port())
		}
		opts := []string{}
		if i%2 == 0 {
			opts = []string{"tsize", "0", "blksize", "1468"}
		}
		return src, server, tftpRRQ(names[i%len(names)], opts...)
	})
	f.waitSent(t, 2000)
	knownNodeBoots(t, s)
	stop()
	sent := f.sent.Load()
	log := s.stop(t)
	if !strings.Contains(log, `msg="tftp: sent" file=snponly.efi peer=`+pxeNodeIP) {
		t.Errorf("the known node's transfer is not in the log")
	}
	summarised(t, log, "tftp", sent)
}

func tftpRRQ(name string, opts ...string) []byte {
	b := []byte{0, 1}
	for _, f := range append([]string{name, "octet"}, opts...) {
		b = append(append(b, f...), 0)
	}
	return b
}

// TestProxyDHCPUnknownMACFlood: DISCOVERs and ProxyDHCP REQUESTs of random
// MACs outside the inventory, broadcast from 0.0.0.0 and from forged
// addresses, a couple of thousand a second, while the known node PXE
// boots: it is answered at every step, because unknown MACs are charged to
// budgets of their own after the inventory check; the unknown MACs are
// summarised in the log.
func TestProxyDHCPUnknownMACFlood(t *testing.T) {
	s := startPXESite(t)
	f := newForger(t, s)
	bcast := netip.MustParseAddrPort("255.255.255.255:67")
	pxe := netip.MustParseAddrPort(pxeCoordIP + ":4011")
	unicast := netip.MustParseAddrPort(pxeCoordIP + ":67")
	unconfigured := netip.MustParseAddrPort("0.0.0.0:68")
	stop := f.flood(t, func(i int) (netip.AddrPort, netip.AddrPort, []byte) {
		mods := append([]dhcpv4.Modifier{}, pxeOptions...)
		src, dst := unconfigured, bcast
		switch i % 4 {
		case 1:
			src, dst = spoofedSource(i), unicast
		case 2:
			src, dst = spoofedSource(i), pxe
			mods = append(mods, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest))
		}
		m, err := dhcpv4.NewDiscovery(randomMAC(), mods...)
		if err != nil {
			panic(err)
		}
		return src, dst, m.ToBytes()
	})
	f.waitSent(t, 2000)
	knownNodeBoots(t, s)
	stop()
	sent := f.sent.Load()
	log := s.stop(t)
	for _, want := range []string{
		`msg="proxy DHCP: answered" node=n1 mac=` + pxeNodeMAC + ` port=67 reply=OFFER arch=7 stage=pxe-firmware file=snponly.efi`,
		`msg="proxy DHCP: answered" node=n1 mac=` + pxeNodeMAC + ` port=4011 reply=ACK arch=7 stage=pxe-firmware file=snponly.efi`,
		`msg="proxy DHCP: answered" node=n1 mac=` + pxeNodeMAC + ` port=67 reply=OFFER arch=7 stage=ipxe`,
		"reason=unknown-mac",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	summarised(t, log, "proxy-dhcp", sent)
}
