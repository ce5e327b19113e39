package suite

import (
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
)

func TestPairConfig(t *testing.T) {
	base := func() manifests.Check {
		return manifests.Check{Name: "pairs", Type: manifests.CheckNodePair, Params: map[string]any{"transfer": "3s", "gather": "6m", "rounds": int64(2)},
			Thresholds: map[string]manifests.Threshold{PairMetricEthernet: {Min: ptr(30)}}}
	}
	cfg, err := PairConfigOf(0, base())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Transport != "ethernet" || cfg.Transfer != 3*time.Second || cfg.Gather != 6*time.Minute || cfg.Rounds != 2 || cfg.EthernetMbps != 30 || cfg.BasePort != 5301 {
		t.Errorf("config %+v", cfg)
	}
	for _, tc := range []struct {
		edit func(*manifests.Check)
		want string
	}{
		{func(c *manifests.Check) { c.Params["transport"] = "carrier-pigeon" }, `params.transport: "carrier-pigeon"`},
		{func(c *manifests.Check) { c.Params["transport"] = "rdma" }, "a rdma node-pair check needs its floor (pairRdmaGbps"},
		{func(c *manifests.Check) { c.Params["skuNics"] = []any{"zero"} }, "params.skuNics: zero"},
		{func(c *manifests.Check) {
			c.Params["skuNics"] = []any{int64(0)}
			c.Params["interfaces"] = []any{"eth*"}
		}, "interfaces and skuNics both"},
		{func(c *manifests.Check) { c.Params["basePort"] = int64(80) }, "params.basePort: 80"},
		{func(c *manifests.Check) { c.Thresholds[PairMetricEthernet] = manifests.Threshold{Max: ptr(5)} }, "floor only"},
		{func(c *manifests.Check) { c.Params["speed"] = "fast" }, "speed"},
	} {
		c := base()
		tc.edit(&c)
		if _, err := PairConfigOf(3, c); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "spec.checks[3] (pairs, type node-pair)") {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
	if errs := pairFits(0, base(), 7*time.Minute); len(errs) != 1 || !strings.Contains(errs[0], "params.gather: 6m0s plus 2m0s") {
		t.Errorf("fits: %v", errs)
	}
	if errs := pairFits(0, base(), 12*time.Minute); len(errs) != 0 {
		t.Errorf("fits: %v", errs)
	}
}

func ptr(v float64) *float64 { return &v }
