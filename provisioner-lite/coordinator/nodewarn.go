package coordinator

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// warnUnlistedNICs warns about each node whose inventory entry names none
// of the NICs its last boot reported: a typo in a MAC, or a moved NIC, and
// the node is a stranger when it network-boots.
func warnUnlistedNICs(ctx context.Context, st *store.Store, ns []store.Node, log *slog.Logger) {
	for _, n := range ns {
		rec, err := st.LatestInventory(ctx, n.ID)
		if err != nil {
			continue // never booted into CURE
		}
		inv, err := inventory.Unmarshal(rec.JSON)
		if err != nil {
			continue
		}
		if nics := inventory.UnlistedNICs(n.MACs, inv); nics != nil {
			log.Warn("none of the node's MACs is a NIC its last boot reported: it will not be recognised when it network-boots; fix its macs",
				"node", n.ID, "macs", strings.Join(n.MACs, ","), "reported", strings.Join(nics, ","), "boot", rec.BootID, "at", rec.Time.Format(time.RFC3339))
		}
	}
}
