package phases

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/paircheck"
	"github.com/cure-oss/cure/tools/checks/suite"
)

func pairInventory() *curev1.Inventory {
	return &curev1.Inventory{Nics: []*curev1.NetInterface{
		{Name: "lo", Addresses: []string{"127.0.0.1/8"}},
		{Name: "eth1", PciAddress: "0000:00:04.0", Model: "Virtio network device", Addresses: []string{"fe80::1/64"}},
		{Name: "eth0", PciAddress: "0000:00:03.0", Model: "Virtio network device", Addresses: []string{"fe80::2/64", "10.78.0.11/24"}},
		{Name: "ens5", PciAddress: "0000:00:05.0", Model: "MT2910 Family [ConnectX-7]", Addresses: []string{"10.1.0.11/24"}},
	}}
}

func TestPairPorts(t *testing.T) {
	virtio := manifests.NICSpec{Model: "Virtio*network device"}
	cx7 := manifests.NICSpec{Model: "*ConnectX-7*"}
	for _, tc := range []struct {
		name  string
		nics  []manifests.NICSpec
		cfg   suite.PairConfig
		rdma  map[string]string
		want  string
		error string
	}{
		{name: "the SKU's NICs, those with an IPv4 address", nics: []manifests.NICSpec{virtio}, want: "eth0 10.78.0.11 ethernet"},
		{name: "every PCI port without a SKU", want: "eth0 10.78.0.11 ethernet; ens5 10.1.0.11 ethernet"},
		{name: "globs", nics: []manifests.NICSpec{virtio}, cfg: suite.PairConfig{Interfaces: []string{"ens*"}}, want: "ens5 10.1.0.11 ethernet"},
		{name: "an SKU entry by index", nics: []manifests.NICSpec{cx7, virtio}, cfg: suite.PairConfig{SKUNICs: []int{1}}, want: "eth0 10.78.0.11 ethernet"},
		{name: "rdma needs a device", nics: []manifests.NICSpec{cx7, virtio}, cfg: suite.PairConfig{Transport: paircheck.RDMA},
			rdma: map[string]string{"ens5": "mlx5_0"}, want: "ens5 10.1.0.11 rdma"},
		{name: "nothing to test", nics: []manifests.NICSpec{cx7}, cfg: suite.PairConfig{Check: "p", Transport: paircheck.RDMA},
			error: "node-pair p: no port to test among the SKU's NICs (1 candidate(s): ens5 (no RDMA device))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Transport == "" {
				tc.cfg.Transport = paircheck.Ethernet
			}
			ps, err := pairPorts(pairInventory(), tc.nics, tc.cfg, func(n string) string { return tc.rdma[n] })
			if tc.error != "" {
				if err == nil || err.Error() != tc.error {
					t.Fatalf("err = %v, want %q", err, tc.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.GetName()+" "+p.GetAddress()+" "+p.GetTransport())
			}
			if strings.Join(got, "; ") != tc.want {
				t.Errorf("ports %q, want %q", strings.Join(got, "; "), tc.want)
			}
		})
	}
}

// TestPairRunner: the check offers its port, takes the coordinator's
// schedule (placed on its clock), serves in one round and measures in the
// other (both through the gate), reports the measured link and returns
// the batch's judgement.
func TestPairRunner(t *testing.T) {
	inbox := agent.NewPairInbox()
	emit := &recEmitter{}
	var reqs []string
	secret := make([]byte, 32)
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	e := New(Config{Root: t.TempDir(), Inventory: func(context.Context) (*curev1.Inventory, error) { return pairInventory(), nil }})
	pr := &pairRunner{e: e, emit: emit, inbox: inbox, nics: []manifests.NICSpec{{Model: "Virtio*"}},
		measure: func(ctx context.Context, r measure.Request) ([]checks.Verdict, error) {
			reqs = append(reqs, r.Pair.Role+" "+r.Pair.Address+"->"+r.Pair.PartnerAddress)
			if r.Pair.Role == paircheck.Server {
				<-ctx.Done()
				return nil, nil
			}
			return []checks.Verdict{paircheck.Result{Forward: 41, Reverse: 900, Unit: "Mb/s"}.Verdict(r.Pair.Partner)}, nil
		}}
	go func() {
		for {
			emit.mu.Lock()
			n := len(emit.ready)
			emit.mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The coordinator's clock is an hour off the node's.
		c := time.Now().Add(time.Hour).UnixMilli()
		inbox.Put(agent.Directive{PairSchedule: &curev1.PairSchedule{Check: "pairs", NowUnixMs: c, StartUnixMs: c + 100, EndUnixMs: c + 700, DurationMs: 1000,
			Members: []string{"n1", "n2", "n3"}, Rounds: 3, Slots: []*curev1.PairSlot{
				{Round: 0, Role: "server", Partner: "n2", Port: "eth0", Address: "127.0.0.11", PartnerAddress: "127.0.0.12", TcpPort: uint32(port), Transport: "ethernet",
					StartUnixMs: c + 100, EndUnixMs: c + 400, Secret: secret},
				{Round: 2, Role: "client", Partner: "n3", Port: "eth0", Address: "127.0.0.11", PartnerPort: "eth0", PartnerAddress: "127.0.0.13", TcpPort: uint32(port), Transport: "ethernet",
					StartUnixMs: c + 400, EndUnixMs: c + 700, Secret: secret},
			}}})
		for {
			emit.mu.Lock()
			n := len(emit.results)
			emit.mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		inbox.Put(agent.Directive{PairVerdicts: &curev1.PairVerdicts{Check: "pairs", Verdicts: []*curev1.Verdict{
			{Component: "pair/n1:eth0-n3:eth0", Status: curev1.VerdictStatus_SKIP, Message: "explained by n3",
				Measurements: []*curev1.Measurement{{Metric: "pairThroughputMbps", Value: 41, Unit: "Mb/s"}}}}}})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	vs, err := pr.run(ctx, suite.PairConfig{Check: "pairs", Transport: "ethernet", Gather: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Status != checks.Skip || vs[0].Check != "pairs" || vs[0].Measurements[0].Value != 41 {
		t.Errorf("verdicts %+v", vs)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %s: the schedule was not placed on the node's clock", time.Since(start))
	}
	if len(emit.ready) != 1 || emit.ready[0].GetPorts()[0].GetAddress() != "10.78.0.11" {
		t.Errorf("ready %v", emit.ready)
	}
	if len(emit.results) != 1 || emit.results[0].GetForward() != 41 || emit.results[0].GetPartner() != "n3" || emit.results[0].GetRound() != 2 {
		t.Errorf("results %v", emit.results)
	}
	// The tools run behind the gate: the server on loopback, the client
	// connecting to its end of the gate on loopback.
	if strings.Join(reqs, ",") != "server 127.0.0.1->127.0.0.12,client 127.0.0.1->127.0.0.1" {
		t.Errorf("slots run %v", reqs)
	}
}
