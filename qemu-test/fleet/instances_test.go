package fleet

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// tftpFirstBlock sends a TFTP read request for name to addr and reports
// whether DATA block 1 came back within wait.
func tftpFirstBlock(t *testing.T, addr, name string, wait time.Duration) bool {
	t.Helper()
	to, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := append(append([]byte{0, 1}, name...), 0)
	req = append(append(req, "octet"...), 0)
	if _, err := c.WriteToUDP(req, to); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	c.SetReadDeadline(time.Now().Add(wait))
	n, _, err := c.ReadFromUDP(buf)
	return err == nil && n >= 4 && binary.BigEndian.Uint16(buf) == 3 && binary.BigEndian.Uint16(buf[2:]) == 1
}

// Three instances on PostgreSQL behind one address, the manifests from one
// bundle in the store, the OS image on one instance only (and a mirror).
// Mid-batch the instance answering the network boot front door (holder of
// the proxy DHCP/TFTP lease) and the instance holding the image are both
// SIGKILLed. Every node is provisioned; the survivor holds the front door
// within the lease TTL and answers a real TFTP request over UDP (a standby
// answered none before); the image it served was fetched from a peer or the
// mirror and verified. The killed instances' runs are taken over (each
// component flashed exactly once, every in-band phase's end in every
// timeline): the 40-node, two-instance version is
// TestInstanceKilledRunsTakenOver (make e2e-fleet).
func TestThreeInstancesOnPostgres(t *testing.T) {
	dsn := pgtest.Start(t).NewDatabase(t)
	var mu sync.Mutex
	var sim *Sim
	mirrorHits := 0
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := sim
		mirrorHits++
		mu.Unlock()
		if s == nil || strings.TrimPrefix(r.URL.Path, "/") != s.ImageSHA256 {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, s.imgPath)
	}))
	defer mirror.Close()
	const ttl, killAfter = 2 * time.Second, 1500 * time.Millisecond
	cfg := Config{Nodes: 9, Seed: 34, Instances: 3, Scale: 200, DSN: dsn, KillAfter: killAfter, LeaseTTL: ttl, Work: t.TempDir(),
		Shared: SharedConfig{ManifestsFromStore: true, ImageHolders: []int{1}, Mirror: mirror.URL, FrontDoor: true, Kill: []int{0, 1}}}
	// While the survivor is still up: it answers TFTP and says in its
	// metrics that it holds the front door and runs bundle 1.
	var afterProblems []string
	var lease store.NamedLease
	var st *store.Store
	var timelineProblems []string
	cfg.AfterBatch = func(ctx context.Context, c curev1.OperatorServiceClient) error {
		survivor := sim.Instances()[2]
		var err error
		if timelineProblems, err = phaseEndProblems(ctx, c, sim.Nodes); err != nil {
			return err
		}
		if lease, err = st.Lease(ctx, "proxy-dhcp"); err != nil {
			return err
		}
		if !tftpFirstBlock(t, survivor.TFTPAddr, "undionly.kpxe", 5*time.Second) {
			afterProblems = append(afterProblems, "the survivor does not answer TFTP")
		}
		if held, err := FrontDoorHeld(ctx, survivor.MetricsAddr); !held {
			afterProblems = append(afterProblems, fmt.Sprintf("the survivor's cure_front_door_held is not 1 (%v)", err))
		}
		if v, err := MetricValue(ctx, survivor.MetricsAddr, "cure_manifest_bundle_version"); v != 1 {
			afterProblems = append(afterProblems, fmt.Sprintf("the survivor's cure_manifest_bundle_version is %v (%v), want 1", v, err))
		}
		return nil
	}
	ctx := context.Background()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mu.Lock()
	sim = s
	mu.Unlock()
	inst := s.Instances()
	st, err = store.OpenDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if l, err := st.Lease(ctx, "proxy-dhcp"); err != nil || l.Holder != inst[0].Name {
		t.Fatalf("front door lease before the kill: %+v %v, want held by %s", l, err, inst[0].Name)
	}
	if tftpFirstBlock(t, inst[2].TFTPAddr, "undionly.kpxe", 500*time.Millisecond) {
		t.Error("a standby instance answered TFTP while another holds the front door")
	}
	if !tftpFirstBlock(t, inst[0].TFTPAddr, "undionly.kpxe", 5*time.Second) {
		t.Error("the front door's holder did not answer TFTP")
	}

	runStart := time.Now()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes on 3 instances, 2 killed: wall %s, healthy first pass %d/%d, mirror requests %d",
		res.Nodes, res.Wall.Round(time.Millisecond), res.HealthyFirstPass, res.Healthy, mirrorHits)
	for _, p := range append(append(res.Problems, afterProblems...), timelineProblems...) {
		t.Error(p)
	}
	check(t, res)
	if res.CoordinatorKills != 2 {
		t.Fatalf("%d instances killed, want 2", res.CoordinatorKills)
	}
	survivor := inst[2]
	if lease.Holder != survivor.Name {
		t.Fatalf("front door lease after the kill: %+v, want held by %s", lease, survivor.Name)
	}
	if took := lease.Since.Sub(runStart); took > killAfter+time.Second+ttl+ttl/3+time.Second {
		t.Errorf("the survivor took the front door %s after the batch started (killed at ~%s, TTL %s)", took, killAfter, ttl)
	}
	log3, err := os.ReadFile(filepath.Join(cfg.Work, survivor.Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`msg="front door lease taken`, `msg="manifest bundle loaded from the store" version=1`} {
		if !strings.Contains(string(log3), want) {
			t.Errorf("%s's log lacks %q", survivor.Name, want)
		}
	}
	// The killed instances' runs were taken over, not started again: each
	// component flashed exactly once.
	took := strings.Count(string(log3), "took over run whose lease expired")
	if took == 0 {
		t.Errorf("%s took no run over: the kills came too late to test a takeover", survivor.Name)
	}
	t.Logf("%s took %d runs over", survivor.Name, took)
	for _, n := range s.Nodes {
		if f := n.AllFlashes(); f[nicComponent] != 1 || f["nvme/0"] != 1 || f["bmc"] != 1 || f["bios"] != 1 {
			t.Errorf("%s: flashes %v, want bmc, bios, nic and nvme flashed exactly once", n.ID, f)
		}
	}
	fetched, served := false, false
	for _, line := range strings.Split(string(log3), "\n") {
		if strings.Contains(line, `msg="artifact fetched and verified"`) && strings.Contains(line, "sha256="+s.ImageSHA256) &&
			(strings.Contains(line, "source="+inst[0].Name) || strings.Contains(line, "source="+inst[1].Name) || strings.Contains(line, "source=mirror")) {
			fetched = true
		}
		if strings.Contains(line, `msg="http request"`) && strings.Contains(line, "/artifacts/sha256/"+s.ImageSHA256) && strings.Contains(line, "status=200") {
			served = true
		}
	}
	if !fetched || !served {
		t.Errorf("%s: OS image (held by %s alone) fetched verified from a peer or the mirror: %v; served to a node: %v", survivor.Name, inst[1].Name, fetched, served)
	}
	if _, err := os.Stat(filepath.Join(cfg.Work, "state-3", "artifacts", "sha256", s.ImageSHA256)); err != nil {
		t.Errorf("the survivor's store lacks the image: %v", err)
	}
}
