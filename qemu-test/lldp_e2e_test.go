package qemutest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/runner/lldp/lldptest"
	"github.com/cure-oss/cure/tools/testenv"
)

// lldpNetnsEnv is set in the re-executed test: the namespace it runs in.
const lldpNetnsEnv = "CURE_LLDP_NETNS"

// TestLLDPCablingQEMU (make test; make e2e-lldp runs it alone) is the cabling check on a booted
// node: node1 on the UEFI test's site network (a bridge in a namespace,
// dnsmasq for addresses, the coordinator's proxy DHCP), a Go sender on its
// tap announcing switch leaf-r12-a port Ethernet12, and a cabling map that
// says Ethernet13. The runner in the CURE image listens (cure.lldp=35s,
// set because the node has a map), the report shows the neighbour on
// eth0, and the coordinator fails nic/eth0 naming the expected and the
// seen neighbour. The same path without a boot:
// TestLLDPNeighboursReported (runner/lldp) and TestCablingMismatchFails
// (provisioner-lite/cabling), the real AF_PACKET listener in a netns.
func TestLLDPCablingQEMU(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	if ns := os.Getenv(lldpNetnsEnv); ns != "" {
		lldpCablingInNamespace(t)
		return
	}
	out := outDir(t)
	testenv.RequireRoot(t, "the test creates network namespaces, a bridge and a tap device")
	for _, c := range []string{"ip", "dnsmasq"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("missing %s: run scripts/install-deps.sh", c)
		}
	}
	lockNetns(t)
	site := newSiteNetwork(t)
	site.startDHCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", site.coord, os.Args[0],
		"-test.run=^TestLLDPCablingQEMU$", "-test.v", "-test.count=1", "-test.timeout=18m")
	cmd.Env = append(os.Environ(), lldpNetnsEnv+"="+site.coord, "CURE_OUT="+out)
	b, err := cmd.CombinedOutput()
	t.Logf("netns| %s", b)
	if err != nil {
		t.Fatalf("the test inside namespace %s failed: %v", site.coord, err)
	}
}

// lldpCablingInNamespace is the test proper, inside the coordinator's namespace.
func lldpCablingInNamespace(t *testing.T) {
	out := outDir(t)
	env := startEnv(t, harness.Options{Out: out, Work: t.TempDir(), UEFI: true,
		Site:                 &harness.SiteNet{Taps: []string{siteTap}, Advertise: coordIP},
		ExtraCoordinatorArgs: []string{"--pxe-interface", siteBridge, "--proxy-dhcp"}})
	n := env.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The cabling map through the API, as curectl nodes import sends it.
	spec := &curev1.NodeSpec{Id: n.ID, Sku: "qemu-nvme", Hostname: n.ID, Serial: n.Serial, Macs: []string{n.MAC},
		Bmc:     &curev1.BMCSpec{Url: n.BMCURL, Username: "admin", Password: "password", Fingerprint: n.BMCFingerprint},
		Cabling: map[string]*curev1.PlannedCable{"eth0": {SwitchName: "leaf-r12-a", Port: "Ethernet13"}}}
	if _, err := env.Client.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: []*curev1.NodeSpec{spec}, Replace: true, Source: "lldp e2e"}); err != nil {
		t.Fatalf("cabling map for %s: %v", n.ID, err)
	}
	lldptest.AnnounceOn(t, siteTap, lldptest.Switch{ChassisMAC: net.HardwareAddr{0x0c, 0x42, 0xa1, 0, 0, 1}, Port: "Ethernet12", SystemName: "leaf-r12-a"}, time.Second)

	start := time.Now()
	rep := provisionAndWait(t, env, n.ID, false)
	t.Logf("provisioned in %s", time.Since(start).Round(time.Second))
	v := verdict(rep, "nic/eth0", "cabling")
	want := "port eth0: expected leaf-r12-a port Ethernet13, seen leaf-r12-a (chassis 0c:42:a1:00:00:01) port Ethernet12"
	if v == nil || v.GetStatus() != curev1.VerdictStatus_FAIL || v.GetMessage() != want {
		t.Errorf("nic/eth0 cabling verdict %v, want FAIL %q", v, want)
	}
	var heard *curev1.LLDPNeighbour
	for _, nic := range rep.GetInventory().GetInventory().GetNics() {
		if nic.GetName() == "eth0" {
			heard = nic.GetLldp()
		}
	}
	if heard.GetSystemName() != "leaf-r12-a" || heard.GetPortId() != "Ethernet12" {
		t.Errorf("inventory eth0 neighbour %v, want leaf-r12-a Ethernet12", heard)
	}
	con, err := os.ReadFile(n.Console)
	if err != nil {
		t.Fatal(err)
	}
	// The listen ended once eth0 heard its switch, well inside the window.
	if i := strings.Index(string(con), "CURE-RUNNER: lldp listened=1 heard=1 waited="); i < 0 {
		t.Errorf("console lacks the runner's lldp line")
	} else {
		t.Logf("%s", strings.SplitN(string(con[i:]), "\n", 2)[0])
	}
}
