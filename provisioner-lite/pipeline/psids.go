package pipeline

import (
	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/blockdev"
)

// psidsFor returns the PSIDs an assignment may carry: only the disks the
// manifest's wipe selector picks from the inventory the runner reported (the
// boot medium never), and only those the node inventory has a PSID for.
func (bc *batchCtl) psidsFor(n store.Node, manifest string, inv *curev1.Inventory) (map[string]string, error) {
	if len(n.PSIDs) == 0 {
		return nil, nil
	}
	_, sku, err := bc.cfg.Manifests.Load(manifest)
	if err != nil {
		return nil, err
	}
	w := sku.Spec.Wipe
	if w == nil || w.Policy == "" || w.Policy == "none" {
		return nil, nil
	}
	sel := blockdev.Selector{Transport: w.Disks.Transport, Model: w.Disks.Model, Serial: w.Disks.Serial, Name: w.Disks.Name,
		MinSize: uint64(w.Disks.MinSize), MaxSize: uint64(w.Disks.MaxSize)}
	if sel.IsEmpty() {
		return nil, nil
	}
	out := map[string]string{}
	for _, d := range inv.GetDisks() {
		if d.GetBootMedium() || d.GetSerial() == "" {
			continue
		}
		ok, err := sel.Matches(blockdev.Disk{Name: d.GetName(), SizeBytes: d.GetSizeBytes(), Model: d.GetModel(), Serial: d.GetSerial(), Transport: d.GetTransport()})
		if err != nil {
			return nil, err
		}
		if psid := n.PSIDs[d.GetSerial()]; ok && psid != "" {
			out[d.GetSerial()] = psid
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
