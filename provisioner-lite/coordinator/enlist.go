package coordinator

import (
	"context"
	"log/slog"
	"net"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/enlist"
)

// EnlistConfig is enlistment's (provisioner-lite/enlist, docs/SECURITY.md
// "Enlistment"): off by default.
type EnlistConfig struct {
	On  bool // --enlist: an unknown MAC's network boot gets CURE in inspect mode
	Max int  // --enlist-max: discovered records kept, not yet approved (default enlist.DefaultMax)
}

// newEnlister is the Enlister of --enlist (nil when off). Proxy DHCP then
// answers unknown MACs too: without it they never reach the iPXE script.
func (d *daemon) newEnlister() *enlist.Enlister {
	c := &d.c
	if !c.Enlist.On {
		return nil
	}
	d.nb.flags.AllMACs = true
	return enlist.New(enlist.Config{Store: d.st, Audit: d.rec, Log: d.log, BaseURL: d.baseURL,
		RunnerAddr: joinAddrs(nonEmpty(c.AdvertiseGRPC, net.JoinHostPort(c.Advertise, listenerPort(d.gl))), c.PeerGRPC),
		Max:        c.Enlist.Max, SKUs: catalogSKUs(d.catalog, d.log)})
}

// enlistBoot is the boot gate's hook for unknown MACs (nil when off).
func enlistBoot(e *enlist.Enlister) func(ctx context.Context, mac, peer string) (bootgate.Decision, error) {
	if e == nil {
		return nil
	}
	return e.Boot
}

// catalogSKUs lists the catalog's SKUs as they are now (a manifest edited
// while running proposes at once); one that does not load is skipped.
func catalogSKUs(c *catalog.Catalog, log *slog.Logger) func() []*manifests.SKU {
	return func() []*manifests.SKU {
		l, err := c.List()
		if err != nil {
			log.Warn("enlist: manifests not listed for proposals", "err", err)
			return nil
		}
		var out []*manifests.SKU
		for _, name := range l.SKUs {
			if _, s, err := c.Load(name); err == nil {
				out = append(out, s)
			}
		}
		return out
	}
}
