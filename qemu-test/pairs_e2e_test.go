package qemutest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/tools/testenv"
)

// The node-pair test's network: the coordinator's namespace holds a
// bridge, the three nodes' tap devices and one end of a veth pair whose
// other end is the site DHCP server's namespace (fixed leases, no boot
// options: the coordinator's proxy DHCP boots the nodes).
const (
	pairNetnsEnv = "CURE_PAIRS_NETNS"
	// pairFullEnv=1 runs the three-node test (make bench-pairs); without
	// it make test runs the two-node one.
	pairFullEnv = "CURE_PAIRS_FULL"
	pairCoordIP = "10.78.0.1"
	pairDHCPIP  = "10.78.0.2"
	// pairShapedTap is node3's tap: the host shapes what it sends to
	// node3 (the tap's egress), so every link of node3 is slow one way.
	pairShapedTap = "tap2"
	// pairRate is the shaping: far below what two TCG guests move over
	// the bridge unshaped (81 to 154 Mb/s per direction on this 2-core
	// machine under load; the shaped direction measured 7.55 Mb/s), far
	// above nothing. The floor, 30 Mb/s, leaves a factor of about 2.7 to
	// the slowest unshaped direction and 4 to the shaped one.
	pairRate = "8mbit"
)

// pairSuite is the burn-in of the node-pair check alone: each node meets
// both others (3 rounds of 2 x 3 s transfers), on the port the SKU
// declares (qemu-nvme: the virtio NIC). The floor sits between the
// shaped 8 Mb/s and what TCG reaches unshaped.
const pairSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: qemu-pairs
spec:
  duration: 12m                   # bounds the check: gather + plan + judgement
  grace: 5m
  end: stay
  stages:
    - name: pairs
      checks:
        - name: node-pairs
          type: node-pair
          params:
            transfer: 3s
            setup: 15s                   # tools unpacked from the bundle under TCG
            gather: 6m                     # three TCG nodes boot at once
          thresholds:
            pairThroughputMbps: {min: 30}
`

// TestNodePairBurnin: three QEMU nodes on one bridge, node3's link shaped
// to 8 Mb/s on the host side, run the node-pair burn-in as one batch
// (CURE_PAIRS_FULL=1, `make bench-pairs`: about 8 minutes here under
// load). make test runs the short version: two nodes, unshaped, one round,
// both pass on their one link (the plan, the runners' measurement over
// their own addresses and the judgement, without the attribution).
// The coordinator plans three rounds (each node meets both others, one
// idle a round), the runners measure between each other over their own
// addresses (iperf3 from the tool bundle, both directions), and the
// batch's judgement names node3's port (nic/eth0 FAIL, every link slow)
// while node1 and node2 pass: their link is fast, their links to node3
// are explained by node3.
func TestNodePairBurnin(t *testing.T) {
	if ns := os.Getenv(pairNetnsEnv); ns != "" {
		pairsInNamespace(t)
		return
	}
	out := outDir(t)
	testenv.RequireRoot(t, "the test creates network namespaces, a bridge and tap devices")
	for _, c := range []string{"ip", "tc", "dnsmasq"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("missing %s: run scripts/install-deps.sh (iproute2, dnsmasq-base)", c)
		}
	}
	if _, err := os.Stat(harness.ToolBundlePath(out)); err != nil {
		t.Fatalf("the tool bundle is not built (make toolbundle): %v", err)
	}
	t.Parallel() // beside the other tests, one namespace test at a time: netnsTests
	lockNetns(t)
	seq := netnsSeq.Add(1)
	coord, dhcp := fmt.Sprintf("cure-pcoord-%d-%d", os.Getpid(), seq), fmt.Sprintf("cure-pdhcp-%d-%d", os.Getpid(), seq)
	ipCmd(t, "netns", "add", coord)
	t.Cleanup(func() { deleteNetns(t, coord) })
	ipCmd(t, "netns", "add", dhcp)
	t.Cleanup(func() { deleteNetns(t, dhcp) })
	cmds := [][]string{
		{"-n", coord, "link", "set", "lo", "up"},
		{"-n", dhcp, "link", "set", "lo", "up"},
		{"-n", coord, "link", "add", "br0", "type", "bridge"},
		{"-n", coord, "addr", "add", pairCoordIP + "/24", "dev", "br0"},
		{"-n", coord, "link", "set", "br0", "up"},
		{"-n", coord, "link", "add", "vethC", "type", "veth", "peer", "name", "vethS", "netns", dhcp},
		{"-n", coord, "link", "set", "vethC", "master", "br0"},
		{"-n", coord, "link", "set", "vethC", "up"},
		{"-n", dhcp, "addr", "add", pairDHCPIP + "/24", "dev", "vethS"},
		{"-n", dhcp, "link", "set", "vethS", "up"},
	}
	nodes := pairNodes()
	for i := range nodes {
		tap := fmt.Sprintf("tap%d", i)
		cmds = append(cmds, []string{"-n", coord, "tuntap", "add", "dev", tap, "mode", "tap"},
			[]string{"-n", coord, "link", "set", tap, "master", "br0"}, []string{"-n", coord, "link", "set", tap, "up"})
	}
	for _, c := range cmds {
		ipCmd(t, c...)
	}
	// Token bucket on node3's tap: what the bridge sends node3 leaves at
	// pairRate.
	if nodes == 3 {
		if b, err := exec.Command("ip", "netns", "exec", coord, "tc", "qdisc", "add", "dev", pairShapedTap, "root", "tbf",
			"rate", pairRate, "burst", "32kbit", "latency", "400ms").CombinedOutput(); err != nil {
			t.Fatalf("tc: %v: %s", err, b)
		}
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "dnsmasq.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"netns", "exec", dhcp, "dnsmasq", "--conf-file=/dev/null", "--keep-in-foreground", "--log-facility=-", "--log-dhcp",
		"--port=0", "--interface=vethS", "--bind-interfaces", "--user=root", "--group=root",
		"--dhcp-range=10.78.0.100,10.78.0.200,255.255.255.0,1h",
		"--dhcp-leasefile=" + filepath.Join(dir, "leases"), "--pid-file=" + filepath.Join(dir, "dnsmasq.pid")}
	for i := 1; i <= nodes; i++ {
		// One address per node at every stage (iPXE, CURE): the boot
		// token is bound to the address that fetched the script.
		args = append(args, fmt.Sprintf("--dhcp-host=52:54:00:c0:de:%02x,10.78.0.%d", i, 10+i))
	}
	dns := exec.Command("ip", args...)
	dns.Stdout, dns.Stderr = lf, lf
	if err := dns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Process.Kill(); _ = dns.Wait(); lf.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", coord, os.Args[0],
		"-test.run=^TestNodePairBurnin$", "-test.v", "-test.count=1", "-test.timeout=24m")
	cmd.Env = append(os.Environ(), pairNetnsEnv+"="+coord, "CURE_OUT="+out, fmt.Sprintf("%s=%d", pairNodesEnv, nodes))
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
	err = cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		b, _ := os.ReadFile(logPath)
		t.Logf("--- site DHCP (dnsmasq) log, last 4 KiB ---\n%s", tail(b, 4096))
		t.Fatalf("the test inside namespace %s failed: %v", coord, err)
	}
}

// pairNodesEnv passes the node count into the namespace.
const pairNodesEnv = "CURE_PAIRS_NODES"

// pairNodes is 3 with CURE_PAIRS_FULL=1 (or inside a three-node run's
// namespace), else 2.
func pairNodes() int {
	if os.Getenv(pairFullEnv) == "1" || os.Getenv(pairNodesEnv) == "3" {
		return 3
	}
	return 2
}

// pairsInNamespace is the test proper, inside the coordinator's namespace.
func pairsInNamespace(t *testing.T) {
	nodes := pairNodes()
	taps := []string{"tap0", "tap1", "tap2"}[:nodes]
	env := startEnv(t, harness.Options{Nodes: nodes, ToolBundle: true, PhaseAttempts: 1,
		Site:                 &harness.SiteNet{Taps: taps, Advertise: pairCoordIP},
		ExtraCoordinatorArgs: []string{"--pxe-interface", "br0", "--proxy-dhcp"}})
	if err := os.WriteFile(filepath.Join(env.Opts.Work, "manifests", "suites", "qemu-pairs.yaml"), []byte(pairSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	reps := make([]*curev1.RunReport, nodes)
	var wg sync.WaitGroup
	for i, n := range env.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runID, err := env.Run(ctx, n.ID, modes.Burnin, "qemu-pairs", false)
			if err != nil {
				t.Errorf("%s: %v", n.ID, err)
				return
			}
			rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
				if e.GetKind() == "metric" {
					return
				}
				t.Logf("%6.1fs %-5s %-6s %-15s %-11s %-8s %s", time.Since(start).Seconds(), n.ID, e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
			})
			if err != nil {
				t.Errorf("follow %s: %v", n.ID, err)
			}
			reps[i] = rep
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	failed := map[string][]string{}
	for _, rep := range reps {
		node := rep.GetNodeId()
		for _, v := range rep.GetVerdicts() {
			if v.GetCheck() != "node-pairs" {
				continue
			}
			t.Logf("%s: %s %s %s (observed %s; expected %s): %s", node, v.GetComponent(), v.GetCheck(), v.GetStatus(), v.GetObserved(), v.GetExpected(), v.GetMessage())
			if v.GetStatus() == curev1.VerdictStatus_FAIL || v.GetStatus() == curev1.VerdictStatus_ERROR {
				failed[node] = append(failed[node], v.GetComponent())
			}
		}
		t.Logf("%s: run %s: %s", node, rep.GetStatus(), rep.GetMessage())
	}
	if nodes == 2 {
		for _, rep := range reps {
			if len(failed[rep.GetNodeId()]) > 0 || rep.GetStatus() != "succeeded" {
				t.Errorf("%s: run %s, failing verdicts %v; want it to pass", rep.GetNodeId(), rep.GetStatus(), failed[rep.GetNodeId()])
			}
			if v := verdict(rep, "pair/node1:eth0-node2:eth0", "node-pairs"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS || v.GetObserved() == "" {
				t.Errorf("%s: node1-node2 link: %v", rep.GetNodeId(), v)
			}
		}
		return
	}
	// node3 is named by its port, on its own run; its two links fail there.
	if v := verdict(reps[2], "nic/eth0", "node-pairs"); v == nil || v.GetStatus() != curev1.VerdictStatus_FAIL ||
		!strings.Contains(v.GetMessage(), "every link of node3 port eth0 is slow (2 partners)") {
		t.Errorf("node3 nic/eth0: %v", v)
	}
	if reps[2].GetStatus() != "failed" {
		t.Errorf("node3's run ended %s, want failed", reps[2].GetStatus())
	}
	// node1 and node2 pass: their link is fast, their links to node3 are
	// node3's.
	for _, rep := range reps[:2] {
		if len(failed[rep.GetNodeId()]) > 0 || rep.GetStatus() != "succeeded" {
			t.Errorf("%s: run %s, failing verdicts %v; want it to pass", rep.GetNodeId(), rep.GetStatus(), failed[rep.GetNodeId()])
		}
		if v := verdict(rep, "pair/node1:eth0-node2:eth0", "node-pairs"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
			t.Errorf("%s: node1-node2 link: %v", rep.GetNodeId(), v)
		}
	}
	if v := verdict(reps[0], "pair/node1:eth0-node3:eth0", "node-pairs"); v == nil || v.GetStatus() != curev1.VerdictStatus_SKIP || !strings.Contains(v.GetMessage(), "explained by node3") {
		t.Errorf("node1's link to node3: %v", v)
	}
}
