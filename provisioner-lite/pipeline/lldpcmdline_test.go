package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestCablingMapAsksForLLDPWindow: a node the site's cabling map names
// boots CURE with cure.lldp=35s (its runner listens until every port with
// link heard its switch, at most a switch's transmit interval); a node
// without a map boots without it (its runner takes only what arrives while
// it boots).
func TestCablingMapAsksForLLDPWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmdline := func(plan map[string]store.Cable) string {
		f := newFixture(t, nil)
		n, err := f.st.GetNode(ctx, "node1")
		if err != nil {
			t.Fatal(err)
		}
		n.Cabling = plan
		if err := f.st.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		if _, err := f.eng.Start(ctx, "node1", modes.Provision, "", false); err != nil {
			t.Fatal(err)
		}
		for ctx.Err() == nil {
			if d, err := f.eng.BootDecision(ctx, mac, "10.0.2.15"); err == nil && d.Boot {
				return d.Cmdline
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("the boot window never opened")
		return ""
	}
	if c := cmdline(nil); strings.Contains(c, "cure.lldp") {
		t.Errorf("no cabling map, yet: %s", c)
	}
	if c := cmdline(map[string]store.Cable{"enp1s0": {Switch: "leaf-r12-a", Port: "Ethernet12"}}); !strings.Contains(c, " cure.lldp=35s") {
		t.Errorf("with a cabling map: %s, want cure.lldp=35s", c)
	}
}
