package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// Sources is where Gather reads: the store, and the suite the policy
// names (its fleet bands).
type Sources struct {
	Store *store.Store
	Suite func(name string) (*manifests.ValidationSuite, error)
}

// Gather reads the evidence of node nodeID for policy p. An error is
// returned only when the node's runs cannot be listed; what cannot be read
// for one requirement is put in Evidence.Errs, so that requirement is an
// error and the others are still shown.
func Gather(ctx context.Context, src Sources, nodeID string, p *manifests.Admission, now time.Time) (Evidence, error) {
	ev := Evidence{Now: now, Errs: map[string]error{}}
	runs, err := src.Store.RunsOfNode(ctx, nodeID)
	if err != nil {
		return ev, fmt.Errorf("admission of node %s: runs: %w", nodeID, err)
	}
	prov, acc := pickRuns(runs, p.Acceptance)
	if prov != nil {
		ev.Provision = src.run(ctx, *prov, ev.Errs)
	}
	if acc != nil {
		ev.Acceptance = src.run(ctx, *acc, ev.Errs)
		src.acceptanceEvidence(ctx, nodeID, p, *acc, runs, &ev)
	}
	if rec, err := src.Store.GetFirmwareRecord(ctx, nodeID); err == nil && rec.Hold.RunID != "" {
		ev.Hold, ev.HoldRun = rec.Hold.Detail, rec.Hold.RunID
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		ev.Errs[ReqMeasurements] = err
	}
	return ev, nil
}

// pickRuns finds the latest provision run and the latest run of the
// acceptance suite that started after it ended (runs: newest first).
func pickRuns(runs []store.Run, acc *manifests.Acceptance) (prov, accRun *store.Run) {
	for i := range runs {
		if runs[i].Mode == modes.Provision {
			prov = &runs[i]
			break
		}
	}
	if prov == nil || acc == nil || prov.EndedAt.IsZero() {
		return prov, nil
	}
	for i := range runs {
		r := &runs[i]
		if r.Mode == modes.Mode(acc.Mode) && r.Manifest == acc.Suite && !r.StartedAt.IsZero() && !r.StartedAt.Before(prov.EndedAt) {
			return prov, r
		}
		if r.ID == prov.ID {
			break
		}
	}
	return prov, nil
}

func (src Sources) run(ctx context.Context, r store.Run, errs map[string]error) *Run {
	out := &Run{ID: r.ID, Mode: r.Mode, Manifest: r.Manifest, Status: r.Status, StartedAt: r.StartedAt, EndedAt: r.EndedAt, Message: r.Message}
	path, err := src.Store.RunBootPath(ctx, r.ID)
	if err != nil {
		errs[ReqBootPath] = fmt.Errorf("run %s: %w", r.ID, err)
	}
	out.BootPath = path
	return out
}

// acceptanceEvidence reads what the acceptance run showed: its verdicts,
// its boots' attestations, its fleet judgement, and whether a firmware or
// hardware change came after it.
func (src Sources) acceptanceEvidence(ctx context.Context, nodeID string, p *manifests.Admission, acc store.Run, runs []store.Run, ev *Evidence) {
	vs, err := src.Store.Verdicts(ctx, acc.ID)
	if err != nil {
		ev.Errs[ReqAcceptance] = fmt.Errorf("verdicts of run %s: %w", acc.ID, err)
	}
	for _, v := range vs {
		ev.Verdicts = append(ev.Verdicts, Verdict{Component: v.Component, Check: v.Check, Status: v.Status})
	}
	as, err := src.Store.RunAttestations(ctx, acc.ID)
	if err != nil {
		ev.Errs[ReqAttestation] = fmt.Errorf("attestations of run %s: %w", acc.ID, err)
	}
	for _, a := range as {
		st := a.Status
		if st == store.AttestPassed {
			st = "passed"
		}
		ev.Attestations = append(ev.Attestations, Attestation{BootID: a.BootID, Status: st, Detail: a.Detail, EKSHA256: a.EKSHA256})
	}
	if f, err := src.fleet(ctx, p.Acceptance.Suite, acc); err != nil {
		ev.Errs[ReqFleetBand] = err
	} else {
		ev.Fleet = f
	}
	changed, err := src.changedAfter(ctx, nodeID, acc, runs)
	if err != nil {
		ev.Errs[ReqAcceptance] = err
	}
	ev.ChangedAfter = changed
}

func (src Sources) fleet(ctx context.Context, suite string, acc store.Run) (Fleet, error) {
	if acc.Status == curev1.RunStatus_RUN_RUNNING || acc.Status == curev1.RunStatus_RUN_PENDING {
		return Fleet{}, nil
	}
	s, err := src.Suite(suite)
	if err != nil {
		return Fleet{}, fmt.Errorf("suite %s: %w", suite, err)
	}
	f := Fleet{Bands: len(fleetband.Bands(&s.Spec)) > 0}
	if !f.Bands {
		return f, nil
	}
	js, _, err := src.Store.RunFleetJudgement(ctx, acc.ID)
	if errors.Is(err, store.ErrNotFound) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	var rec curev1.FleetJudgements
	if err := protojson.Unmarshal(js, &rec); err != nil {
		return f, fmt.Errorf("fleet judgement of run %s: %w", acc.ID, err)
	}
	f.Judged = true
	for _, j := range rec.GetJudgements() {
		if !j.GetApplied() {
			f.NotApplied = fmt.Sprintf("%s %s %s: %s", j.GetComponent(), j.GetCheck(), j.GetMetric(), j.GetNote())
			break
		}
	}
	return f, nil
}

// changedAfter names a run that could change firmware (provision,
// service) started after acc did, or an inventory taken after acc whose
// hardware and firmware differ from acc's; "" when none.
func (src Sources) changedAfter(ctx context.Context, nodeID string, acc store.Run, runs []store.Run) (string, error) {
	for _, r := range runs {
		if (r.Mode == modes.Provision || r.Mode == modes.Service) && r.StartedAt.After(acc.StartedAt) {
			return fmt.Sprintf("%s run %s started after it", r.Mode, r.ID), nil
		}
	}
	accInv, err := src.Store.RunInventory(ctx, acc.ID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil // no boot of the run reported yet
	}
	if err != nil {
		return "", fmt.Errorf("inventory of run %s: %w", acc.ID, err)
	}
	latest, err := src.Store.LatestInventory(ctx, nodeID)
	if err != nil {
		return "", fmt.Errorf("latest inventory of node %s: %w", nodeID, err)
	}
	if latest.RunID == acc.ID || !latest.Time.After(accInv.Time) {
		return "", nil
	}
	a, err := Fingerprint(accInv.JSON)
	if err != nil {
		return "", err
	}
	b, err := Fingerprint(latest.JSON)
	if err != nil {
		return "", err
	}
	if a != b {
		return fmt.Sprintf("the hardware or firmware run %s reported differs from the acceptance run's", latest.RunID), nil
	}
	return "", nil
}

// Fingerprint is a hash of what identifies a node's hardware and its
// in-band firmware in an inventory (serials, models, firmware and
// VBIOS versions, DIMMs, CPUs), leaving out what changes from boot to
// boot (addresses, link state, temperatures, machine checks).
func Fingerprint(js []byte) (string, error) {
	inv, err := inventory.Unmarshal(js)
	if err != nil {
		return "", fmt.Errorf("inventory: %w", err)
	}
	var ids []string
	s := inv.GetSystem()
	ids = append(ids, "system "+s.GetVendor()+"|"+s.GetProduct()+"|"+s.GetSerial()+"|"+s.GetUuid()+"|"+s.GetBiosVersion()+"|"+s.GetBmcVersion())
	for _, n := range inv.GetNvme() {
		ids = append(ids, "nvme "+n.GetModel()+"|"+n.GetSerial()+"|"+n.GetFirmware())
	}
	for _, n := range inv.GetNics() {
		ids = append(ids, "nic "+n.GetMac()+"|"+n.GetModel()+"|"+n.GetFirmware())
	}
	for _, g := range inv.GetGpus() {
		ids = append(ids, "gpu "+g.GetUuid()+"|"+g.GetSerial()+"|"+g.GetVbios()+"|"+g.GetName())
	}
	for _, d := range inv.GetDimms() {
		ids = append(ids, fmt.Sprintf("dimm %s|%s|%d|%s", d.GetLocator(), d.GetSerial(), d.GetSizeBytes(), d.GetPartNumber()))
	}
	for _, p := range inv.GetProcessors() {
		ids = append(ids, fmt.Sprintf("cpu %d|%s|%d", p.GetId(), p.GetModel(), p.GetCores()))
	}
	ids = append(ids, fmt.Sprintf("memory %d", inv.GetMemoryPhysicalBytes()))
	slices.Sort(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
