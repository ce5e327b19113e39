package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// AttestPolicy is what the coordinator knows of measured boot beyond the
// boot itself: the image report's UKI a boot is checked against, and
// whether a node's SKU requires attestation.
type AttestPolicy interface {
	ImageUKI() *imagereport.UKI
	Required(ctx context.Context, n store.Node) (bool, error)
}

// BeginAttestation issues a boot its challenge. The caller must hold a
// live boot token (issued, or bound to this very boot): a challenge is
// bound to the token and boot id, single-use and short-lived.
func (s *RunnerService) BeginAttestation(ctx context.Context, in *curev1.AttestBegin) (*curev1.AttestChallenge, error) {
	s.init()
	peerIP := peerHost(ctx)
	if in.GetToken() == "" || in.GetBootId() == "" || len(in.GetBootId()) > maxName {
		return nil, status.Error(codes.InvalidArgument, "BeginAttestation needs token and boot_id")
	}
	hash := store.TokenHash(in.GetToken())
	tok, err := s.Store.LookupBootToken(ctx, hash)
	now := time.Now()
	if err != nil || tok.State == store.TokenRevoked || now.After(tok.Expires) && tok.State != store.TokenBound ||
		tok.State == store.TokenBound && tok.BootID != in.GetBootId() {
		s.Audit.Security(ctx, store.AuditEntry{Actor: tok.NodeID, Peer: peerIP, Action: audit.BootTokenRejected, RunID: tok.RunID,
			Result: "refused", Detail: "BeginAttestation with an unknown, expired, revoked or other boot's token"})
		return nil, status.Error(codes.Unauthenticated, "unknown or expired boot token")
	}
	if !s.challengeRate.Allow(hash) {
		return nil, status.Errorf(codes.ResourceExhausted, "attestation challenges for this boot token come faster than %g a second: back off and retry", s.SessionRate)
	}
	_, out, err := s.attest.Issue(hash, in.GetBootId(), in, attestation.QuotePCRs(s.imageUKI()), now)
	if err != nil {
		s.Audit.Security(ctx, store.AuditEntry{Actor: tok.NodeID, Peer: peerIP, Action: audit.AttestationFailed, RunID: tok.RunID, Nodes: []string{tok.NodeID},
			Result: "refused", Detail: textsafe.BoundedLine("BeginAttestation: "+err.Error(), maxMessage)})
		return nil, status.Errorf(codes.InvalidArgument, "attestation keys refused: %v", err)
	}
	return out, nil
}

func (s *RunnerService) imageUKI() *imagereport.UKI {
	if s.Attestation == nil {
		return nil
	}
	return s.Attestation.ImageUKI()
}

// bootVerdict is how a session's boot stands with measured boot.
type bootVerdict struct {
	attested bool // the boot's attestation verified
	admit    bool // the pipeline may hand it work and secrets
}

// judgeBoot decides a boot's attestation on its first Hello (or finds the
// verdict its first Hello got, for a reconnect), records it, and enrolls
// or checks the node's EK and firmware measurements. The rule
// (docs/SECURITY.md): a boot that presents an attestation must pass it; a
// node with an enrolled (or pinned) EK must attest on every boot; a SKU
// with attestation: required must attest from its first boot. Only an
// admitted boot's session reaches the pipeline.
func (s *RunnerService) judgeBoot(ctx context.Context, node store.Node, run store.Run, hello *curev1.Hello, outcome, peerIP string, log *slog.Logger) bootVerdict {
	required := false
	if s.Attestation != nil {
		r, err := s.Attestation.Required(ctx, node)
		if err != nil {
			// A SKU that does not load cannot say "not required".
			log.Warn("attestation policy of the node's SKU unreadable: attestation required", "sku", node.SKU, "err", err)
			r = true
		}
		required = r
	}
	ek, ekErr := s.Store.NodeEK(ctx, node.ID)
	enrolled := ekErr == nil
	required = required || enrolled
	bootID := textsafe.BoundedLine(hello.GetBootId(), maxName)
	if outcome == store.Resumed {
		if prev, err := s.Store.GetBootAttestation(ctx, run.ID, bootID); err == nil {
			passed := prev.Status == store.AttestPassed
			return bootVerdict{attested: passed, admit: passed || (!required && prev.Status == store.AttestAbsent)}
		}
	}
	now := time.Now().UTC()
	res := s.attest.Judge(store.TokenHash(hello.GetToken()), hello.GetBootId(), hello.GetAttestation(), attestation.Expected{UKI: s.imageUKI()}, now)
	entry := store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Result: "refused"}
	if res.Status == attestation.Passed && enrolled && res.EKSHA256 != ek.SHA256 {
		res.Status = attestation.Failed
		res.Detail = fmt.Sprintf("the boot's TPM has endorsement key %s; node %s's is %s (%s %s)", res.EKSHA256, node.ID, ek.SHA256, ek.Source, ek.EnrolledAt.Format(time.RFC3339))
		entry.Action, entry.Detail = audit.EKMismatch, res.Detail
		s.Audit.Security(ctx, entry)
	} else if res.Status == attestation.Failed {
		entry.Action = audit.AttestationFailed
		entry.Detail = textsafe.BoundedLine(res.Detail, maxMessage)
		if res.Mismatch != nil && !strings.Contains(entry.Detail, res.Mismatch.String()) {
			entry.Detail = textsafe.BoundedLine(res.Detail+"; "+res.Mismatch.String(), maxMessage)
		}
		s.Audit.Security(ctx, entry)
	}
	if res.Status == attestation.Failed {
		required = true // a boot that presents an attestation must pass it
	}
	if res.Status == attestation.Absent && required {
		entry.Action = audit.AttestationMissing
		entry.Detail = textsafe.BoundedLine(fmt.Sprintf("boot %s of node %s must attest (SKU requires it, or the node has an enrolled EK): %s", bootID, node.ID, res.Detail), maxMessage)
		s.Audit.Security(ctx, entry)
	}
	if err := s.Store.PutBootAttestation(ctx, store.BootAttestation{RunID: run.ID, BootID: bootID, NodeID: node.ID, Status: res.Status,
		Detail: textsafe.BoundedLine(res.Detail, maxMessage), EKSHA256: res.EKSHA256, Time: now}); err != nil {
		log.Error("attestation not recorded: boot treated as unattested", "err", err)
		return bootVerdict{admit: !required}
	}
	msg := fmt.Sprintf("boot %s attestation: %s: %s", bootID, res.Status, res.Detail)
	if !required && res.Status == attestation.Absent {
		msg += " (allowed: the SKU does not require attestation and the node has no enrolled EK)"
	} else if res.Status != attestation.Passed {
		msg += ": no secrets are handed to this boot and its events are kept as unattested"
	}
	s.event(ctx, store.Event{RunID: run.ID, NodeID: node.ID, Source: runstate.SourceCoordinator, Time: now, Phase: run.Phase, Kind: runstate.EventInfo,
		Message: textsafe.BoundedLine(msg, maxMessage)})
	if res.Status != attestation.Absent || required {
		s.attestVerdict(ctx, run, res, now)
	}
	if res.Status != attestation.Passed {
		return bootVerdict{admit: !required}
	}
	if !enrolled {
		if got, err := s.Store.EnrollEK(ctx, store.NodeEK{NodeID: node.ID, SHA256: res.EKSHA256, EnrolledAt: now, RunID: run.ID}); err != nil {
			log.Error("EK not enrolled", "err", err)
		} else if got.SHA256 != res.EKSHA256 {
			// Another boot enrolled a different EK between our read and write.
			entry.Action, entry.Detail = audit.EKMismatch, fmt.Sprintf("the boot's TPM has endorsement key %s; node %s's was just enrolled as %s", res.EKSHA256, node.ID, got.SHA256)
			s.Audit.Security(ctx, entry)
			return bootVerdict{}
		} else {
			s.event(ctx, store.Event{RunID: run.ID, NodeID: node.ID, Source: runstate.SourceCoordinator, Time: now, Phase: run.Phase, Kind: runstate.EventInfo,
				Message: fmt.Sprintf("node %s endorsement key enrolled on first use: sha256 %s; every later boot must attest with it", node.ID, res.EKSHA256)})
		}
	}
	s.firmwareMeasurements(ctx, node, run, hello, res, peerIP, now, log)
	return bootVerdict{attested: true, admit: true}
}

// attestVerdict puts the boot's attestation in the run's verdicts (a boot
// let through without one gets none: its run's verdicts are what they were
// before measured boot).
func (s *RunnerService) attestVerdict(ctx context.Context, run store.Run, res attestation.Result, now time.Time) {
	v := store.Verdict{RunID: run.ID, Component: "tpm", Check: "attestation", Time: now, Message: textsafe.Bounded(res.Detail, maxMessage)}
	switch res.Status {
	case attestation.Passed:
		v.Status, v.Observed = curev1.VerdictStatus_PASS, "EK "+res.EKSHA256
	case attestation.Failed:
		v.Status = curev1.VerdictStatus_FAIL
		if m := res.Mismatch; m != nil {
			v.Component = fmt.Sprintf("tpm/pcr%d", m.PCR)
			v.Expected, v.Observed = textsafe.Bounded(m.Expected, 1024), textsafe.Bounded(m.Observed, 1024)
		}
	default: // absent where attestation was required
		v.Status = curev1.VerdictStatus_FAIL
	}
	if err := s.Store.PutVerdict(ctx, v); err != nil {
		s.Log.Error("store attestation verdict", "err", err)
	}
}

// firmwareMeasurements compares an attested boot's firmware PCRs with the
// node's record: the first attested boot records them, as does the first
// after a firmware change the pipeline made; any other difference is a
// drift, flagged as a security event and a FAIL verdict naming the PCR and
// both values.
func (s *RunnerService) firmwareMeasurements(ctx context.Context, node store.Node, run store.Run, hello *curev1.Hello, res attestation.Result, peerIP string, now time.Time, log *slog.Logger) {
	vals := attestation.FirmwareValues(res.PCRs)
	fw := textsafe.BoundedLine(hello.GetInventory().GetSystem().GetBiosVersion(), maxName)
	rec, err := s.Store.GetFirmwareRecord(ctx, node.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		log.Error("firmware measurements not checked", "err", err)
		return
	}
	record := func(why string) {
		if err := s.Store.RecordFirmware(ctx, store.FirmwareRecord{NodeID: node.ID, SKU: node.SKU, Firmware: fw, PCRs: vals, RunID: run.ID, RecordedAt: now}); err != nil {
			log.Error("firmware measurements not recorded", "err", err)
			return
		}
		s.event(ctx, store.Event{RunID: run.ID, NodeID: node.ID, Source: runstate.SourceCoordinator, Time: now, Phase: run.Phase, Kind: runstate.EventInfo,
			Message: textsafe.BoundedLine(fmt.Sprintf("firmware measurements %s (SKU %s, firmware %q): %s", why, node.SKU, fw, formatPCRs(vals)), maxMessage)})
	}
	switch {
	case len(rec.PCRs) == 0:
		record("recorded on the node's first attested boot")
	case rec.ChangeRun != "":
		record(fmt.Sprintf("re-recorded after the firmware change run %s made (%s)", rec.ChangeRun, rec.ChangeReason))
	default:
		m := attestation.FirmwareDrift(rec.PCRs, res.PCRs)
		if m == nil {
			_ = s.Store.PutVerdict(ctx, store.Verdict{RunID: run.ID, Component: "tpm", Check: "firmware_measurement", Status: curev1.VerdictStatus_PASS,
				Observed: "as recorded by run " + rec.RunID, Time: now})
			return
		}
		detail := fmt.Sprintf("firmware measurement drift on node %s without a firmware change by the pipeline: %s (recorded by run %s for SKU %s, firmware %q; this boot reports firmware %q)",
			node.ID, m, rec.RunID, rec.SKU, rec.Firmware, fw)
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Action: audit.FirmwareDrift,
			Result: "flagged", Detail: textsafe.BoundedLine(detail, maxMessage)})
		_ = s.Store.PutVerdict(ctx, store.Verdict{RunID: run.ID, Component: fmt.Sprintf("tpm/pcr%d", m.PCR), Check: "firmware_measurement",
			Status: curev1.VerdictStatus_FAIL, Expected: m.Expected, Observed: m.Observed, Message: textsafe.Bounded(detail, maxMessage), Time: now})
		s.event(ctx, store.Event{RunID: run.ID, NodeID: node.ID, Source: runstate.SourceCoordinator, Time: now, Phase: run.Phase, Kind: runstate.EventInfo,
			Message: textsafe.BoundedLine(detail, maxMessage)})
	}
}

func formatPCRs(vals map[string]string) string {
	var b strings.Builder
	for _, p := range attestation.FirmwarePCRs {
		if v, ok := vals[fmt.Sprint(p)]; ok {
			fmt.Fprintf(&b, " PCR%d=%s", p, v)
		}
	}
	return strings.TrimSpace(b.String())
}

// unattestedEvent is how an event of a boot that failed (or skipped) a
// required attestation is kept: a log line saying so, its payload intact
// for an operator, never a phase event or verdict the pipeline acts on.
func unattestedEvent(e store.Event) store.Event {
	e.Message = textsafe.BoundedLine(fmt.Sprintf("unattested boot's %s (not acted on): %s %s", e.Kind, e.Status, e.Message), maxMessage)
	e.Kind, e.Status = runstate.EventLog, "UNATTESTED"
	return e
}
