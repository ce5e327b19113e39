package qemutest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/testenv"
)

// The UEFI test's network: the coordinator's namespace holds the bridge,
// the node's tap device and one end of a veth pair whose other end is the
// site DHCP server's namespace. Nothing reaches the host's own network.
const (
	uefiNetnsEnv = "CURE_UEFI_NETNS" // set in the re-executed test: the namespace it runs in
	siteBridge   = "br0"
	siteTap      = "tap0"
	coordIP      = "10.77.0.1"
	dhcpIP       = "10.77.0.2"
	// nodeIP is the site DHCP's fixed lease for node1's MAC: iPXE, the
	// CURE kernel and the installed OS all get it, so --bind-boot-ip (the
	// boot token bound to the address that fetched the script) holds.
	nodeIP  = "10.77.0.10"
	nodeMAC = "52:54:00:c0:de:01" // harness node1
	// siteIPv6Prefix is the site's IPv6 /64, announced by router
	// advertisements only.
	siteIPv6Prefix = "fd77::"
)

// TestUEFIProxyDHCPProvision is a site's network boot, end to end: an OVMF
// node on a bridge beside a plain DHCP server (dnsmasq, addresses only, no
// PXE options) and provisioner-lite's proxy DHCP and TFTP. UEFI PXE gets
// the address from dnsmasq and snponly.efi from the proxy over TFTP; iPXE
// gets the boot script URL from the proxy; CURE registers, provisions, and
// the installed OS boots under UEFI from its NVMe disk and calls back.
//
// The test builds the network in two fresh namespaces, then runs itself
// again inside the coordinator's one (the virtual BMC, provisioner-lite and
// QEMU all live there); the outer run checks what the site's DHCP server
// did.
func TestUEFIProxyDHCPProvision(t *testing.T) {
	if ns := os.Getenv(uefiNetnsEnv); ns != "" {
		uefiProvisionInNamespace(t, ns)
		return
	}
	out := outDir(t)
	testenv.RequireRoot(t, "the test creates network namespaces, a bridge and a tap device")
	var missing []string
	for _, f := range []string{harness.OVMFCode, harness.OVMFVars, "/usr/lib/ipxe/snponly.efi", "/usr/lib/ipxe/undionly.kpxe"} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, c := range []string{"ip", "dnsmasq"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing %v: run scripts/install-deps.sh (ovmf, ipxe, dnsmasq-base, iproute2)", missing)
	}
	t.Parallel() // beside the other tests, one namespace test at a time: netnsTests
	lockNetns(t)
	site := newSiteNetwork(t)
	dnsmasqLog := site.startDHCP(t)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", site.coord, os.Args[0],
		"-test.run=^TestUEFIProxyDHCPProvision$", "-test.v", "-test.count=1", "-test.timeout=18m")
	cmd.Env = append(os.Environ(), uefiNetnsEnv+"="+site.coord, "CURE_OUT="+out)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			t.Log("netns| " + sc.Text())
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	b, _ := os.ReadFile(dnsmasqLog)
	if err != nil {
		t.Logf("--- site DHCP (dnsmasq) log, last 4 KiB ---\n%s", tail(b, 4096))
		t.Fatalf("the test inside namespace %s failed: %v", site.coord, err)
	}
	// The site's DHCP server leased the node its address at every stage
	// (UEFI PXE, iPXE, CURE, the installed OS) and never said a word
	// about booting: every boot instruction came from the proxy.
	if n := strings.Count(string(b), "DHCPACK(vethS) "+nodeIP+" "+nodeMAC); n < 4 {
		t.Errorf("dnsmasq acked %s to %s %d times, want at least 4 (UEFI PXE, iPXE, CURE, installed OS):\n%s", nodeIP, nodeMAC, n, tail(b, 4096))
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, opt := range []string{"option: 43 ", "option: 60 ", "option: 66 ", "option: 67 "} {
			if strings.Contains(line, "sent size") && strings.Contains(line, opt) {
				t.Errorf("the site DHCP server sent a boot option: %s", line)
			}
		}
	}
}

// siteNetwork is the two namespaces, torn down by t.Cleanup.
type siteNetwork struct {
	coord, dhcp string
}

// ipCmd runs ip(8) and fails the test on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newSiteNetwork(t *testing.T) *siteNetwork {
	t.Helper()
	// Names unique per run: other tests (and other checkouts) may build
	// networks on this machine at the same time.
	seq := netnsSeq.Add(1)
	s := &siteNetwork{coord: fmt.Sprintf("cure-coord-%d-%d", os.Getpid(), seq), dhcp: fmt.Sprintf("cure-dhcp-%d-%d", os.Getpid(), seq)}
	ipCmd(t, "netns", "add", s.coord)
	t.Cleanup(func() { deleteNetns(t, s.coord) })
	ipCmd(t, "netns", "add", s.dhcp)
	t.Cleanup(func() { deleteNetns(t, s.dhcp) })
	for _, c := range [][]string{
		{"-n", s.coord, "link", "set", "lo", "up"},
		{"-n", s.dhcp, "link", "set", "lo", "up"},
		{"-n", s.coord, "link", "add", siteBridge, "type", "bridge"},
		{"-n", s.coord, "addr", "add", coordIP + "/24", "dev", siteBridge},
		{"-n", s.coord, "link", "set", siteBridge, "up"},
		{"-n", s.coord, "tuntap", "add", "dev", siteTap, "mode", "tap"},
		{"-n", s.coord, "link", "set", siteTap, "master", siteBridge},
		{"-n", s.coord, "link", "set", siteTap, "up"},
		{"-n", s.coord, "link", "add", "vethC", "type", "veth", "peer", "name", "vethS", "netns", s.dhcp},
		{"-n", s.coord, "link", "set", "vethC", "master", siteBridge},
		{"-n", s.coord, "link", "set", "vethC", "up"},
		{"-n", s.dhcp, "addr", "add", dhcpIP + "/24", "dev", "vethS"},
		{"-n", s.dhcp, "addr", "add", siteIPv6Prefix + "2/64", "dev", "vethS", "nodad"},
		{"-n", s.dhcp, "link", "set", "vethS", "up"},
	} {
		ipCmd(t, c...)
	}
	return s
}

// deleteNetns stops what still runs in the namespace (only this test's
// processes can be there) and deletes it, with its devices.
func deleteNetns(t *testing.T, ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			var p int
			if _, err := fmt.Sscan(pid, &p); err == nil && p > 1 {
				if proc, err := os.FindProcess(p); err == nil {
					_ = proc.Kill()
				}
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
		t.Logf("ip netns delete %s: %v: %s", ns, err, out)
	}
}

// startDHCP runs the site's DHCP server: Debian's dnsmasq, DHCP only
// (--port=0: no DNS), no PXE or boot options at all, a fixed lease for the
// node's MAC, and IPv6 router advertisements as a site router sends. It returns the path of its log.
func (s *siteNetwork) startDHCP(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "dnsmasq.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", s.dhcp, "dnsmasq",
		"--conf-file=/dev/null", "--keep-in-foreground", "--log-facility=-", "--log-dhcp",
		"--port=0", "--interface=vethS", "--bind-interfaces", "--user=root", "--group=root",
		"--dhcp-range=10.77.0.100,10.77.0.200,255.255.255.0,1h",
		"--dhcp-host="+nodeMAC+","+nodeIP,
		// Router advertisements (no DHCPv6): iPXE's interface configuration
		// waits for IPv6 autoconfiguration as well as DHCP, some 15 s
		// without a router, as it would on a site with IPv6.
		"--enable-ra", "--dhcp-range="+siteIPv6Prefix+",ra-only",
		"--dhcp-leasefile="+filepath.Join(dir, "leases"), "--pid-file="+filepath.Join(dir, "dnsmasq.pid"))
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		lf.Close()
	})
	return logPath
}

// uefiProvisionInNamespace is the test proper, inside the coordinator's
// namespace.
func uefiProvisionInNamespace(t *testing.T, ns string) {
	out := outDir(t)
	work := t.TempDir()
	env := startEnv(t, harness.Options{Out: out, Work: work, UEFI: true,
		Site:                 &harness.SiteNet{Taps: []string{siteTap}, Advertise: coordIP},
		ExtraCoordinatorArgs: []string{"--pxe-interface", siteBridge, "--proxy-dhcp"}})
	n := env.Nodes[0]
	if n.MAC != nodeMAC {
		t.Fatalf("harness node1 MAC %s, the site DHCP's fixed lease is for %s", n.MAC, nodeMAC)
	}
	start := time.Now()
	rep := provisionAndWait(t, env, n.ID, false)
	wall := time.Since(start)
	checkProvisioned(t, env, rep)

	// Booted in UEFI both times: into CURE over the network, then the
	// installed OS from its disk.
	var boots []string
	for _, b := range n.BMC.History() {
		boots = append(boots, string(b.Device)+"/"+b.Mode)
	}
	if !slices.Equal(boots, []string{"Pxe/UEFI", "Hdd/UEFI"}) {
		t.Errorf("boots = %v, want [Pxe/UEFI Hdd/UEFI]", boots)
	}
	for _, o := range n.BMC.Overrides() {
		if o.Mode != vbmc.ModeUEFI {
			t.Errorf("override %s/%s set mode %q, want UEFI (the BMC offers it)", o.Target, o.Enabled, o.Mode)
		}
	}
	con, err := os.ReadFile(n.Console)
	if err != nil {
		t.Fatal(err)
	}
	coord, err := os.ReadFile(filepath.Join(env.Opts.Work, "coordinator.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Each step of the chain, in order, in the node's console.
	steps := []string{
		"Start PXE over IPv4", "Station IP address is " + nodeIP, "NBP filename is snponly.efi", // OVMF's own PXE
		"iPXE", "using SNP", "Filename: http://" + coordIP, // iPXE from the proxy's TFTP, then the script URL
		"cure.token=",                                                                                 // CURE's kernel from the per-MAC script
		`starting Boot`, "UEFI QEMU NVMe", "EFI stub: Loaded initrd from LINUX_EFI_INITRD_MEDIA_GUID", // the installed OS's unified kernel image
	}
	at := 0
	for _, s := range steps {
		i := strings.Index(string(con[at:]), s)
		if i < 0 {
			t.Errorf("console lacks %q after byte %d", s, at)
			continue
		}
		at += i + len(s)
	}
	// The coordinator answered firmware, then iPXE, and never handed out
	// an address (its replies carry none: see netboot's tests).
	for _, want := range []string{
		`msg="proxy DHCP: answered" node=node1 mac=` + nodeMAC + ` port=67 reply=OFFER arch=7 stage=pxe-firmware file=snponly.efi`,
		`msg="proxy DHCP: answered" node=node1 mac=` + nodeMAC + ` port=4011 reply=ACK arch=7 stage=pxe-firmware file=snponly.efi`,
		`msg="tftp: sent" file=snponly.efi peer=` + nodeIP,
		`stage=ipxe file=http://` + coordIP,
	} {
		if !strings.Contains(string(coord), want) {
			t.Errorf("coordinator log lacks %q", want)
		}
	}
	reportBootTimes(t, env, n, string(coord), rep.GetRunId(), wall)
}

var logTime = regexp.MustCompile(`^time=(\S+) `)

// firstLogAfter is the time of the first coordinator log line at or after
// since that contains every one of subs.
func firstLogAfter(log string, since time.Time, subs ...string) time.Time {
	for _, line := range strings.Split(log, "\n") {
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || ts.Before(since) {
			continue
		}
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return ts
		}
	}
	return time.Time{}
}

// reportBootTimes logs where the wall time went, from the BMC's boot
// records, the coordinator's log lines and the run's phases. A measure for
// the reader, not an assertion.
func reportBootTimes(t *testing.T, env *harness.Env, n *harness.Node, coord, runID string, wall time.Duration) {
	h := n.BMC.History()
	if len(h) < 2 {
		return
	}
	t0 := h[0].Time
	marks := []struct {
		name string
		at   time.Time
	}{
		{"QEMU started (PXE, UEFI)", t0},
		{"OVMF POST → first DHCP answer from the proxy", firstLogAfter(coord, t0, `msg="proxy DHCP: answered"`, "stage=pxe-firmware")},
		{"UEFI PXE: DHCP, ProxyDHCP 4011, TFTP snponly.efi", firstLogAfter(coord, t0, `msg="tftp: sent"`)},
		{"iPXE start → its DHCP answered", firstLogAfter(coord, t0, `msg="proxy DHCP: answered"`, "stage=ipxe")},
		{"iPXE configured (DHCP and IPv6 autoconf) → per-MAC script", firstLogAfter(coord, t0, `msg="http request"`, "path=/ipxe/")},
		{"kernel + initramfs over HTTP", firstLogAfter(coord, t0, `msg="http request"`, "path=/image/initramfs")},
		{"kernel boot → runner registered", firstLogAfter(coord, t0, `msg="runner connected"`)},
	}
	st := openStore(t, env)
	if ps, err := st.Phases(context.Background(), runID); err == nil {
		for _, p := range ps {
			switch p.Name {
			case modes.OSInstall:
				marks = append(marks, struct {
					name string
					at   time.Time
				}{"in-band phases through os_install", p.EndedAt})
			case modes.WaitForHostOS:
				marks = append(marks,
					struct {
						name string
						at   time.Time
					}{"reboot to disk (UEFI)", h[1].Time},
					struct {
						name string
						at   time.Time
					}{"OVMF → UKI → installed OS calls back", p.EndedAt})
			case modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.WaitForCURE, modes.Hardware, modes.BMC, modes.BIOS, modes.BIOSSettings,
				modes.HGX, modes.NIC, modes.DPU, modes.NVMe, modes.SEDRevert, modes.SetBootDisk, modes.Validate, modes.PowerOffAtEnd:
				// marked from the coordinator's log above, or not at all
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "UEFI proxy-DHCP provision: %s wall (Provision call to report)\n", wall.Round(100*time.Millisecond))
	prev := t0
	for _, m := range marks[1:] {
		if m.at.IsZero() {
			fmt.Fprintf(&b, "  %-75s  (no log line)\n", m.name)
			continue
		}
		fmt.Fprintf(&b, "  %-75s %6.1fs  (at %6.1fs)\n", m.name, m.at.Sub(prev).Seconds(), m.at.Sub(t0).Seconds())
		prev = m.at
	}
	t.Log(b.String())
}
