package suite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/paircheck"
)

// PairConfig is a node-pair check as both ends read it: the runner finds
// its ports and measures its slots, the coordinator plans the batch's
// rounds and judges the links.
type PairConfig struct {
	Check, Stage string
	// Transport of the ports tested: ethernet (iperf3) or rdma (perftest).
	Transport string
	// Interfaces are globs over interface names choosing the ports (in
	// PCI order); empty: the interfaces of the NICs the node's SKU
	// declares (spec.hardware.nics), else every physical one with an
	// address.
	Interfaces []string
	// SKUNICs picks entries of the SKU's spec.hardware.nics by index (a
	// port belongs to the first entry matching it, as in the hardware
	// check); empty: all of them.
	SKUNICs []int
	// Rounds is how many partners each node meets (0: the planner's
	// default, 3).
	Rounds int
	// Transfer is one direction's transfer in a slot.
	Transfer time.Duration
	// Setup is the slack a slot's window allows around its transfers.
	Setup time.Duration
	// Gather is how long the coordinator waits for the batch's other
	// nodes to reach the check before it plans with those that did.
	Gather time.Duration
	// BasePort is the first TCP port a server listens on.
	BasePort int
	// EthernetMbps and RDMAGbps are the bars on a link's worse direction.
	EthernetMbps, RDMAGbps float64
}

// Defaults of a node-pair check.
const (
	DefaultPairTransfer = 10 * time.Second
	DefaultPairGather   = 10 * time.Minute
)

// Pair metrics (the link verdict's worse direction).
const (
	PairMetricEthernet = "pairThroughputMbps"
	PairMetricRDMA     = "pairRdmaGbps"
)

// PairConfigOf reads a node-pair check's params and thresholds; an
// unknown or malformed one is an error naming the check and the field.
func PairConfigOf(i int, mc manifests.Check) (PairConfig, error) {
	p := newParams(i, mc)
	cfg := pairConfig(mc, p)
	if errs := p.done(); len(errs) > 0 {
		return cfg, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return cfg, nil
}

func pairConfig(mc manifests.Check, p *params) PairConfig {
	cfg := PairConfig{Check: mc.Name, Stage: mc.Stage, Transport: p.str("transport"), Interfaces: p.strs("interfaces"),
		Rounds: int(p.int("rounds", 0)), Transfer: p.duration("transfer", DefaultPairTransfer),
		Setup: p.duration("setup", 5*time.Second), Gather: p.duration("gather", DefaultPairGather),
		BasePort: int(p.int("basePort", 5301))}
	if v, ok := p.getAs("skuNics", KindInts); ok {
		list, _ := v.([]any)
		for _, x := range list {
			i, ok := x.(int64)
			if !ok || i < 0 || i > 63 {
				p.errorf("params.skuNics", "%v: want indexes into the SKU's spec.hardware.nics (0, 1, ...)", x)
				continue
			}
			cfg.SKUNICs = append(cfg.SKUNICs, int(i))
		}
		if list == nil {
			p.errorf("params.skuNics", "expected a list of indexes, found %T %v", v, v)
		}
	}
	if len(cfg.SKUNICs) > 0 && len(cfg.Interfaces) > 0 {
		p.errorf("params", "interfaces and skuNics both choose the ports: set one")
	}
	if cfg.Transport == "" {
		cfg.Transport = paircheck.Ethernet
	}
	if cfg.Transport != paircheck.Ethernet && cfg.Transport != paircheck.RDMA {
		p.errorf("params.transport", "%q: want %s (iperf3) or %s (perftest)", cfg.Transport, paircheck.Ethernet, paircheck.RDMA)
	}
	if cfg.Rounds < 0 || cfg.Rounds > 64 {
		p.errorf("params.rounds", "%d: want 1..64 partners per node", cfg.Rounds)
	}
	if cfg.BasePort < 1024 || cfg.BasePort > 65535-64 {
		p.errorf("params.basePort", "%d: want 1024..%d", cfg.BasePort, 65535-64)
	}
	eth, rdma := p.limit(PairMetricEthernet), p.limit(PairMetricRDMA)
	for m, l := range map[string]checks.Limit{PairMetricEthernet: eth, PairMetricRDMA: rdma} {
		if l.Max != nil {
			p.errorf("thresholds."+m, "a link's rate has a floor only (min)")
		}
	}
	if eth.Min != nil {
		cfg.EthernetMbps = *eth.Min
	}
	if rdma.Min != nil {
		cfg.RDMAGbps = *rdma.Min
	}
	if cfg.Transport == paircheck.Ethernet && eth.Min == nil || cfg.Transport == paircheck.RDMA && rdma.Min == nil {
		p.errorf("thresholds", "a %s node-pair check needs its floor (%s: {min: ...})", cfg.Transport,
			map[string]string{paircheck.Ethernet: PairMetricEthernet, paircheck.RDMA: PairMetricRDMA}[cfg.Transport])
	}
	return cfg
}

// pairCheck is the node-pair check's func: the runner's Env.Pair does the
// exchange with the coordinator and the measuring.
func pairCheck(mc manifests.Check, p *params, env Env) checks.Func {
	cfg := pairConfig(mc, p)
	return func(ctx context.Context) ([]checks.Verdict, error) {
		if env.Pair == nil {
			return nil, fmt.Errorf("node-pair check %s: this runner cannot meet other nodes (no coordinator session)", mc.Name)
		}
		return env.Pair(ctx, cfg)
	}
}

// PairSlack is what a node-pair check needs past its gather time at the
// least: the plan's lead and windows, the judgement's wait.
const PairSlack = 2 * time.Minute

// pairFits says why a node-pair check cannot fit the suite's duration,
// which bounds every check: its gather time plus PairSlack must.
func pairFits(i int, mc manifests.Check, suiteDur time.Duration) []string {
	p := newParams(i, mc)
	cfg := pairConfig(mc, p)
	if suiteDur > 0 && cfg.Gather+PairSlack >= suiteDur {
		return []string{fmt.Sprintf("%s: params.gather: %s plus %s for the rounds and the judgement does not fit in spec.duration %s",
			p.where, cfg.Gather, PairSlack, suiteDur)}
	}
	return nil
}
