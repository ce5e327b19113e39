package enlist

import (
	"context"
	"fmt"
	"net"
	"strconv"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/proto"
)

// List is the discovered records (approved ones with all), each with its
// report and the inspection rules' proposal.
func (e *Enlister) List(ctx context.Context, all bool) ([]*curev1.Discovered, error) {
	ds, err := e.cfg.Store.ListDiscovered(ctx, all)
	if err != nil {
		return nil, err
	}
	out := make([]*curev1.Discovered, 0, len(ds))
	for _, d := range ds {
		out = append(out, e.describe(d))
	}
	return out, nil
}

// Get is one record, as List shows it.
func (e *Enlister) Get(ctx context.Context, id string) (*curev1.Discovered, error) {
	d, err := e.cfg.Store.GetDiscovered(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("discovered %s: %w", id, err)
	}
	return e.describe(d), nil
}

// Approved marks record id approved as node nodeID.
func (e *Enlister) Approved(ctx context.Context, id, nodeID string) error {
	return e.cfg.Store.ApproveDiscovered(ctx, id, nodeID)
}

func (e *Enlister) describe(d store.Discovered) *curev1.Discovered {
	out := &curev1.Discovered{Id: d.ID, Mac: d.MAC, Peer: d.Peer, FirstSeenUnixMs: d.FirstSeen.UnixMilli(), State: d.State, NodeId: d.NodeID, Arch: d.Arch}
	if !d.ReportedAt.IsZero() {
		out.ReportedUnixMs = d.ReportedAt.UnixMilli()
	}
	if len(d.Report) == 0 {
		return out
	}
	rep := &curev1.InspectReport{}
	if err := proto.Unmarshal(d.Report, rep); err != nil {
		e.cfg.Log.Warn("enlist: stored report unreadable", "discovered", d.ID, "err", err)
		return out
	}
	out.Report = rep
	if out.Arch == "" {
		out.Arch = rep.GetArch()
	}
	if e.cfg.SKUs != nil {
		if p, ok := manifests.Propose(e.cfg.SKUs(), FactsOf(d.MAC, rep)); ok {
			out.ProposedSku, out.ProposedName, out.Rule = p.SKU, p.Name, "spec.inspection of SKU "+p.SKU
		}
	}
	return out
}

// FactsOf are the facts of a report that inspection rules match.
func FactsOf(mac string, rep *curev1.InspectReport) manifests.Facts {
	inv := rep.GetInventory()
	f := manifests.Facts{Serial: inv.GetSystem().GetSerial(), MAC: mac, Arch: rep.GetArch()}
	for _, p := range inv.GetProcessors() {
		f.CPUModels = append(f.CPUModels, p.GetModel())
	}
	if len(f.CPUModels) == 0 && inv.GetCpuModel() != "" {
		f.CPUModels = []string{inv.GetCpuModel()}
	}
	for _, g := range inv.GetGpus() {
		f.GPUModels = append(f.GPUModels, g.GetName())
	}
	for _, n := range inv.GetNics() {
		if n.GetPciVendorId() != 0 {
			f.NICVendors = append(f.NICVendors, n.GetPciVendorId())
		}
	}
	return f
}

// BMCURL is the Redfish service the report's host interface records
// name (https://ADDRESS[:PORT]), or "" when none names an address.
func BMCURL(rep *curev1.InspectReport) string {
	for _, h := range rep.GetBmc() {
		ip := net.ParseIP(h.GetBmcIp())
		if ip == nil || ip.IsUnspecified() {
			continue
		}
		host := ip.String()
		if p := h.GetBmcPort(); p != 0 && p != 443 {
			return "https://" + net.JoinHostPort(host, strconv.Itoa(int(p)))
		}
		if ip.To4() == nil {
			host = "[" + host + "]"
		}
		return "https://" + host
	}
	return ""
}
