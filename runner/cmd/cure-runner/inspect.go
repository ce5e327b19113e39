package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/runner/transport"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inspect is the whole work of an enlisting machine's boot (cure.mode=
// inspect, provisioner-lite/enlist): it reports its inventory, its BMC's
// host interface records (SMBIOS type 42), its drives with whether a PSID
// revert can erase them, and its ports' LLDP neighbours, then waits for an
// operator. It has no phase executor and opens drives only for TCG
// Discovery (a Security Receive): modes.Inspect refuses every write.
func (r *runner) inspect(ctx context.Context, conn *grpc.ClientConn, inv *curev1.Inventory) {
	if err := modes.CheckWrite(modes.Inspect, "inspect"); err == nil {
		r.fatal("inspect", fmt.Errorf("mode inspect may write: refusing to run it"))
		return
	}
	rep := r.inspectReport(inv)
	client := curev1.NewRunnerServiceClient(conn)
	for wait := 5 * time.Second; ctx.Err() == nil; wait = min(2*wait, 2*time.Minute) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ack, err := client.Inspect(cctx, rep)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			r.say("enlisted as %s: inspection reported; waiting for an operator (curectl nodes approve %s)", ack.GetDiscoveredId(), ack.GetDiscoveredId())
			<-ctx.Done()
			return
		case codes.Unauthenticated, codes.InvalidArgument:
			// A spent or expired token does not come back: a new boot gets one.
			r.fatal("inspect", fmt.Errorf("inspection report refused: %w", err))
			return
		}
		r.log.Warn("inspection report not delivered, retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// inspectReport gathers the report; what cannot be read is left out and
// logged (an inspection reports what it finds).
func (r *runner) inspectReport(inv *curev1.Inventory) *curev1.InspectReport {
	bootID, err := transport.BootID(r.procRoot)
	if err != nil {
		r.log.Warn("boot id unavailable", "err", err)
	}
	rep := &curev1.InspectReport{Token: r.cmd.Enlist, BootId: bootID, Inventory: inv, RunnerVersion: runnerVersion(), Arch: runtime.GOARCH}
	if rep.Bmc, err = inventory.HostInterfaces(r.opt.root); err != nil {
		r.log.Warn("smbios type 42", "err", err)
	}
	for _, n := range inv.GetNics() {
		if l := n.GetLldp(); l != nil {
			rep.Lldp = append(rep.Lldp, &curev1.InspectNeighbour{Port: n.GetName(), ChassisId: l.GetChassisId(), PortId: l.GetPortId(),
				SystemName: l.GetSystemName(), PortDescription: l.GetPortDescription()})
		}
	}
	disks, err := inventory.Disks(r.opt.root)
	if err != nil {
		r.log.Warn("drives", "err", err)
	}
	for _, d := range disks {
		rep.Drives = append(rep.Drives, r.inspectDrive(d))
	}
	r.say("inspect: %d drives, %d BMC host interface records, %d LLDP neighbours", len(rep.Drives), len(rep.Bmc), len(rep.Lldp))
	return rep
}

// inspectDrive is a drive with its TCG SSC and whether a PSID revert
// erases it (then its label's PSID belongs in the node inventory).
func (r *runner) inspectDrive(d blockdev.Disk) *curev1.InspectDrive {
	out := &curev1.InspectDrive{Name: d.Name, Model: d.Model, Serial: d.Serial, SizeBytes: d.SizeBytes, Transport: d.Transport}
	if r.opt.dryRun {
		return out
	}
	disc, err := tcgDiscovery(r.opt.root, d)
	if err != nil {
		out.Note = err.Error()
		return out
	}
	out.Ssc = disc.SSCName()
	out.PsidRevert = disc.SupportsRevert() && disc.CryptoErasesOnRevert()
	return out
}

// tcgDiscovery is the drive's Level 0 Discovery (read only).
func tcgDiscovery(root string, d blockdev.Disk) (*opal.Discovery, error) {
	switch d.Transport {
	case "nvme":
		ctrls, err := nvme.Enumerate(root)
		if err != nil {
			return nil, err
		}
		for _, c := range ctrls {
			for _, ns := range c.Namespaces {
				if ns != d.Name {
					continue
				}
				dev, err := nvme.Open(c.DevPath)
				if err != nil {
					return nil, err
				}
				defer dev.Close()
				return opal.Discover(opal.NVMeTransport{Admin: dev})
			}
		}
		return nil, fmt.Errorf("no NVMe controller lists %s", d.Name)
	case "sata", "sas", "scsi":
		dev, err := opal.OpenDevice(d.Path)
		if err != nil {
			return nil, err
		}
		defer dev.Close()
		return opal.Discover(opal.SCSITransport{Dev: dev})
	}
	return nil, fmt.Errorf("%w: transport %s", opal.ErrNoTCG, d.Transport)
}
