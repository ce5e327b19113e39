package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
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
	"github.com/cure-oss/cure/tools/tpm/attest"
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
// live boot token (issued, or bound to this very boot) and, with BindPeer,
// ask from the token's address; its keys must be an EK and an AK, and an
// EK the node has enrolled or pinned must be its own. All of that is
// checked before the token's challenge budget is charged: a token read off
// the wire cannot spend the node's attestation budget from elsewhere, nor
// with keys that could never attest. A challenge is bound to the token and
// boot id, single-use and short-lived.
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
	entry := store.AuditEntry{Actor: tok.NodeID, Peer: peerIP, RunID: tok.RunID, Nodes: []string{tok.NodeID}, Result: "refused"}
	if want := tokenAddress(tok); s.BindPeer && want != "" && want != peerIP {
		entry.Action = audit.BootTokenPeer
		entry.Detail = fmt.Sprintf("BeginAttestation from %s with a boot token of node %s that belongs to %s (nothing charged)", peerIP, tok.NodeID, want)
		s.Audit.Security(ctx, entry)
		return nil, status.Error(codes.PermissionDenied, "boot token presented from another address than it belongs to")
	}
	if err := attestation.CheckBegin(in); err != nil {
		entry.Action, entry.Detail = audit.AttestationFailed, textsafe.BoundedLine("BeginAttestation: "+err.Error(), maxMessage)
		s.Audit.Security(ctx, entry)
		return nil, status.Errorf(codes.InvalidArgument, "attestation keys refused: %v", err)
	}
	if err := s.nodeEKMatches(ctx, tok.NodeID, in.GetEkPublic()); err != nil {
		entry.Action, entry.Detail = audit.EKMismatch, textsafe.BoundedLine("BeginAttestation: "+err.Error(), maxMessage)
		s.Audit.Security(ctx, entry)
		return nil, status.Errorf(codes.PermissionDenied, "endorsement key refused: %v", err)
	}
	if !s.challengeRate.Allow(hash) {
		return nil, status.Errorf(codes.ResourceExhausted, "attestation challenges for this boot token come faster than %g a second: back off and retry", s.SessionRate)
	}
	_, out, err := s.attest.Issue(ctx, hash, in.GetBootId(), in, attestation.QuotePCRs(s.imageUKI()), now)
	if err != nil {
		entry.Action, entry.Detail = audit.AttestationFailed, textsafe.BoundedLine("BeginAttestation: "+err.Error(), maxMessage)
		s.Audit.Security(ctx, entry)
		return nil, status.Errorf(codes.InvalidArgument, "attestation keys refused: %v", err)
	}
	return out, nil
}

// tokenAddress is the address a boot token belongs to: the one its boot
// registered from once bound, else the one it was issued to ("" when none
// was recorded).
func tokenAddress(tok store.BootToken) string {
	if tok.State == store.TokenBound && tok.BoundPeer != "" {
		return tok.BoundPeer
	}
	return tok.Peer
}

// nodeEKMatches refuses an EK other than the one the node has enrolled or
// pinned (a peer's own TPM): it could only fail the judgement later. A
// node without one passes here; the judgement decides its enrolment.
func (s *RunnerService) nodeEKMatches(ctx context.Context, nodeID string, ekPub []byte) error {
	ek, err := s.Store.NodeEK(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %s's endorsement key unreadable: %w", nodeID, err)
	}
	fp, err := attest.EKFingerprint(ekPub)
	if err != nil {
		return err
	}
	if fp != ek.SHA256 {
		return fmt.Errorf("the TPM has endorsement key %s; node %s's is %s (%s)", fp, nodeID, ek.SHA256, ek.Source)
	}
	return nil
}

// storeChallenges keeps challenges in the store every instance shares, so
// a runner that fails over between BeginAttestation and its Hello is
// judged by the instance it reaches.
type storeChallenges struct {
	st       *store.Store
	instance string
}

func (k storeChallenges) Put(ctx context.Context, ch *attestation.Challenge, max int) error {
	return k.st.PutAttestChallenge(ctx, store.AttestChallenge{ID: ch.ID, TokenHash: ch.TokenHash, BootID: ch.BootID, EKPublic: ch.EKPublic, EKCert: ch.EKCert,
		EKChain: bytes.Join(ch.EKChain, nil), AKPublic: ch.AKPublic, PCRs: ch.PCRs, Nonce: ch.Nonce, SecretSHA256: hex.EncodeToString(ch.SecretSHA256),
		IssuedAt: ch.Issued, Expires: ch.Expires}, max)
}

func (k storeChallenges) Take(ctx context.Context, id string, now time.Time) (*attestation.Challenge, error) {
	if id == "" || len(id) > maxName {
		return nil, attestation.ErrNoChallenge
	}
	c, err := k.st.TakeAttestChallenge(ctx, id, k.instance, now)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrChallengeUsed) {
		return nil, fmt.Errorf("%w (%v)", attestation.ErrNoChallenge, err)
	}
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(c.SecretSHA256)
	if err != nil {
		return nil, fmt.Errorf("challenge %s: stored secret hash: %w", id, err)
	}
	ch := &attestation.Challenge{ID: c.ID, TokenHash: c.TokenHash, BootID: c.BootID, EKPublic: c.EKPublic, EKCert: c.EKCert, AKPublic: c.AKPublic,
		PCRs: c.PCRs, Nonce: c.Nonce, SecretSHA256: secret, Issued: c.IssuedAt, Expires: c.Expires}
	if len(c.EKChain) > 0 {
		certs, err := x509.ParseCertificates(c.EKChain)
		if err != nil {
			return nil, fmt.Errorf("challenge %s: stored EK intermediates: %w", id, err)
		}
		for _, cert := range certs {
			ch.EKChain = append(ch.EKChain, cert.Raw)
		}
	}
	return ch, nil
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
	skuRequired := false
	if s.Attestation != nil {
		r, err := s.Attestation.Required(ctx, node)
		if err != nil {
			// A SKU that does not load cannot say "not required".
			log.Warn("attestation policy of the node's SKU unreadable: attestation required", "sku", node.SKU, "err", err)
			r = true
		}
		skuRequired = r
	}
	ek, ekErr := s.Store.NodeEK(ctx, node.ID)
	enrolled := ekErr == nil
	required := skuRequired || enrolled
	bootID := textsafe.BoundedLine(hello.GetBootId(), maxName)
	if outcome == store.Resumed {
		if prev, err := s.Store.GetBootAttestation(ctx, run.ID, bootID); err == nil {
			passed := prev.Status == store.AttestPassed
			admit := passed || (!required && prev.Status == store.AttestAbsent)
			if passed && s.measurementsHeld(ctx, node.ID, log) {
				admit = false
			}
			return bootVerdict{attested: passed, admit: admit}
		}
	}
	now := time.Now().UTC()
	res := s.judge(ctx, node, hello, bootID, skuRequired, now, log)
	entry := store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Result: "refused"}
	if action := s.checkEK(node, ek, enrolled, skuRequired, &res, now); action != "" {
		entry.Action, entry.Detail = action, textsafe.BoundedLine(res.Detail, maxMessage)
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
			how := "its certificate not verified (no --ek-roots: trust on first use)"
			if s.EKRoots != nil {
				how = "its certificate chains to an EK root of " + s.EKRoots.Dir
			}
			s.event(ctx, store.Event{RunID: run.ID, NodeID: node.ID, Source: runstate.SourceCoordinator, Time: now, Phase: run.Phase, Kind: runstate.EventInfo,
				Message: fmt.Sprintf("node %s endorsement key enrolled on first use: sha256 %s, %s; every later boot must attest with it", node.ID, res.EKSHA256, how)})
		}
	}
	held := s.firmwareMeasurements(ctx, node, run, hello, res, peerIP, now, log)
	return bootVerdict{attested: true, admit: !held}
}

// judge runs the coordinator's judgement of a boot's attestation against
// the image's report; on a SKU that requires attestation, a missing image
// report fails it as a configuration error rather than skipping the image
// check.
func (s *RunnerService) judge(ctx context.Context, node store.Node, hello *curev1.Hello, bootID string, skuRequired bool, now time.Time, log *slog.Logger) attestation.Result {
	if el := hello.GetAttestation().GetEventLog(); len(el) > 0 {
		// The firmware's own log, for an operator learning what a SKU's
		// firmware measures (the boot path rule is in attestation.CheckBootPath).
		log.Debug("boot event log", "boot", bootID, "bytes", len(el), "base64", base64.StdEncoding.EncodeToString(el))
	}
	uki := s.imageUKI()
	res := s.attest.Judge(ctx, store.TokenHash(hello.GetToken()), hello.GetBootId(), hello.GetAttestation(), attestation.Expected{UKI: uki}, now)
	if res.Status == attestation.Passed && skuRequired && uki == nil {
		// Without the image's report nothing says what booted: the
		// attestation would prove only that some TPM quoted something.
		res.Status = attestation.Failed
		res.Detail = fmt.Sprintf("configuration error: SKU %s requires attestation and the image report (report.json with its uki, under --image-dir) is missing or names no UKI: "+
			"the boot of node %s cannot be checked against the image, so it is not admitted", node.SKU, node.ID)
		log.Error("attestation required but the image report names no UKI: boot refused", "sku", node.SKU)
	}
	return res
}

// checkEK judges a verified boot's EK against the node's: an enrolled
// or pinned EK must be the boot's; with EK roots configured, an EK not
// pinned must come with a certificate chaining to one of them (a pinned
// EK is the site's own word, and needs none). On a SKU that requires
// attestation, a first enrolment without EK roots is a configuration
// error, never trust on first use: whoever boots first with the node's
// token (a peer with its own TPM) would become the node. A refusal fails
// res and returns the security event's action.
func (s *RunnerService) checkEK(node store.Node, ek store.NodeEK, enrolled, skuRequired bool, res *attestation.Result, now time.Time) string {
	if res.Status != attestation.Passed {
		return ""
	}
	if enrolled && res.EKSHA256 != ek.SHA256 {
		res.Status = attestation.Failed
		res.Detail = fmt.Sprintf("the boot's TPM has endorsement key %s; node %s's is %s (%s %s)", res.EKSHA256, node.ID, ek.SHA256, ek.Source, ek.EnrolledAt.Format(time.RFC3339))
		return audit.EKMismatch
	}
	if !enrolled && skuRequired && s.EKRoots == nil {
		res.Status = attestation.Failed
		res.Detail = fmt.Sprintf("configuration error: SKU %s requires attestation and node %s has no pinned EK, so its first enrolment needs the EK certificate to chain to --ek-roots, "+
			"and the coordinator runs without --ek-roots: endorsement key %s not enrolled (set --ek-roots to the TPM manufacturers' roots, or pin the EK in the nodes file's ek_sha256)",
			node.SKU, node.ID, res.EKSHA256)
		return audit.EKUntrusted
	}
	if s.EKRoots == nil || enrolled && ek.Source == store.EKPinned {
		return ""
	}
	if err := s.EKRoots.Verify(res.EKPublic, res.EKCert, res.EKChain, now); err != nil {
		res.Status = attestation.Failed
		res.Detail = fmt.Sprintf("endorsement key %s of node %s is not trusted: %v (supply its manufacturer's root in --ek-roots, or pin the EK in the nodes file's ek_sha256)",
			res.EKSHA256, node.ID, err)
		return audit.EKUntrusted
	}
	return ""
}

// measurementsHeld reports whether a firmware measurement hold keeps the
// node out of service; a record that cannot be read holds it (doubt).
func (s *RunnerService) measurementsHeld(ctx context.Context, nodeID string, log *slog.Logger) bool {
	rec, err := s.Store.GetFirmwareRecord(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		log.Error("firmware measurement hold unreadable: boot not admitted", "err", err)
		return true
	}
	return rec.Held()
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

// firmwareMeasurements compares an attested boot's measurements (the
// firmware PCRs and PCR 4) with the node's record and with what its SKU's
// firmware is known to produce (store.SKUPCRs). The node's first attested
// boot records them. The first after a firmware change the pipeline made
// re-records them (ending a hold) only when each of attestation.SKUPCRs is
// unchanged or is what the new firmware is known to produce on another
// node of the SKU (attestation.Rebaseline). Any other difference, and a PCR
// 4 other than the SKU's known value for its firmware and image, is a
// drift: a security event, a FAIL verdict naming the PCR and both values,
// and a hold that keeps the node out of service until an admin accepts the
// new values (AcceptMeasurements). A vetted boot teaches the SKU the values
// it did not know yet. It reports whether the node is held: a held boot is
// not admitted.
func (s *RunnerService) firmwareMeasurements(ctx context.Context, node store.Node, run store.Run, hello *curev1.Hello, res attestation.Result, peerIP string, now time.Time, log *slog.Logger) bool {
	m := measured{node: node, run: run, vals: attestation.BootValues(res.PCRs), quoted: res.PCRs, peerIP: peerIP, now: now, log: log,
		fw: textsafe.BoundedLine(hello.GetInventory().GetSystem().GetBiosVersion(), maxName)}
	if uki := s.imageUKI(); uki != nil {
		m.image = uki.AuthenticodeSHA256
	}
	rec, err := s.Store.GetFirmwareRecord(ctx, node.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		log.Error("firmware measurements not checked: boot not admitted", "err", err)
		return true
	}
	known, err := s.Store.SKUPCRs(ctx, node.SKU, m.fw, m.image)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		log.Error("the SKU's known measurements unreadable: boot not admitted", "err", err)
		return true
	}
	m.rec, m.known = rec, known
	switch {
	case len(rec.PCRs) == 0:
		if d := attestation.BootPathDrift(known, nil, res.PCRs); d != nil {
			// Its record is this boot, held (the SKU learns nothing from
			// it): an admin's accept adopts it.
			s.recordFirmware(ctx, m, "recorded on the node's first attested boot", false)
			return s.drift(ctx, m, d, "on its first attested boot, PCR 4 differs from what SKU "+node.SKU+" is known to produce with this firmware and image")
		}
		return s.recordFirmware(ctx, m, "recorded on the node's first attested boot", true)
	case rec.ChangeRun != "":
		if d := attestation.Rebaseline(rec.PCRs, known, res.PCRs); d != nil {
			return s.drift(ctx, m, d, fmt.Sprintf("after the firmware change run %s made (%s), a measurement is neither the node's recorded one nor what firmware %q is known to produce on another node of SKU %s",
				rec.ChangeRun, rec.ChangeReason, m.fw, node.SKU))
		}
		why := fmt.Sprintf("re-recorded after the firmware change run %s made (%s), each unchanged or as firmware %q is known to produce on SKU %s", rec.ChangeRun, rec.ChangeReason, m.fw, node.SKU)
		if rec.Held() {
			why += fmt.Sprintf("; the measurement hold of run %s ends", rec.Hold.RunID)
		}
		return s.recordFirmware(ctx, m, why, true)
	}
	d := attestation.FirmwareDrift(rec.PCRs, res.PCRs)
	why := "without a firmware change by the pipeline"
	if d == nil {
		d, why = attestation.BootPathDrift(known, rec.PCRs, res.PCRs), "PCR 4 differs from what SKU "+node.SKU+" is known to produce with this firmware and image"
	}
	if d == nil && !rec.Held() {
		_ = s.Store.PutVerdict(ctx, store.Verdict{RunID: run.ID, Component: "tpm", Check: "firmware_measurement", Status: curev1.VerdictStatus_PASS,
			Observed: "as recorded by run " + rec.RunID, Time: now})
		s.learnSKU(ctx, m)
		return false
	}
	if d == nil {
		s.stillHeld(ctx, m)
		return true
	}
	return s.drift(ctx, m, d, why)
}

// measured is one attested boot's measurements and what they are judged
// against.
type measured struct {
	node      store.Node
	run       store.Run
	vals      map[string]string // attestation.BootValues
	quoted    map[uint32][]byte
	fw, image string // BIOS version the boot reported, the image's Authenticode hash
	rec       store.FirmwareRecord
	known     map[string]string // the SKU's, for fw and image
	peerIP    string
	now       time.Time
	log       *slog.Logger
}

func (s *RunnerService) info(ctx context.Context, m measured, msg string) {
	s.event(ctx, store.Event{RunID: m.run.ID, NodeID: m.node.ID, Source: runstate.SourceCoordinator, Time: m.now, Phase: m.run.Phase, Kind: runstate.EventInfo,
		Message: textsafe.BoundedLine(msg, maxMessage)})
}

// recordFirmware makes the boot's values the node's record (ending a
// hold) and, if learn, teaches the SKU what it did not know; it reports
// whether the node is still held (a hold not cleared still holds).
func (s *RunnerService) recordFirmware(ctx context.Context, m measured, why string, learn bool) bool {
	if err := s.Store.RecordFirmware(ctx, store.FirmwareRecord{NodeID: m.node.ID, SKU: m.node.SKU, Firmware: m.fw, PCRs: m.vals, RunID: m.run.ID, RecordedAt: m.now}); err != nil {
		m.log.Error("firmware measurements not recorded", "err", err)
		return m.rec.Held()
	}
	s.info(ctx, m, fmt.Sprintf("firmware measurements %s (SKU %s, firmware %q): %s", why, m.node.SKU, m.fw, formatPCRs(m.vals)))
	if learn {
		s.learnSKU(ctx, m)
	}
	return false
}

// learnSKU offers a vetted boot's values as what its SKU's firmware (and
// image, for PCR 4) produces: kept only where none is known yet.
func (s *RunnerService) learnSKU(ctx context.Context, m measured) {
	if err := s.Store.AddSKUPCRs(ctx, store.KnownPCRs{SKU: m.node.SKU, Firmware: m.fw, Image: m.image, PCRs: attestation.SKUValues(m.vals),
		NodeID: m.node.ID, RunID: m.run.ID, At: m.now}); err != nil {
		m.log.Warn("the SKU's known measurements not updated", "err", err)
	}
}

// stillHeld keeps a boot of a held node out: a FAIL verdict naming the hold.
func (s *RunnerService) stillHeld(ctx context.Context, m measured) {
	h := m.rec.Hold
	detail := fmt.Sprintf("node %s is held out of service since %s for a firmware measurement drift (run %s: %s): this boot is not admitted until an admin runs `curectl nodes accept-measurements %s`",
		m.node.ID, h.At.Format(time.RFC3339), h.RunID, h.Detail, m.node.ID)
	_ = s.Store.PutVerdict(ctx, store.Verdict{RunID: m.run.ID, Component: "tpm", Check: "firmware_measurement", Status: curev1.VerdictStatus_FAIL,
		Expected: "no measurement hold", Observed: "held by run " + h.RunID, Message: textsafe.Bounded(detail, maxMessage), Time: m.now})
	s.info(ctx, m, detail)
}

// drift flags a drift and holds the node: security event, FAIL verdict,
// event, the hold in the store, then OnMeasurementDrift (the pool's
// quarantine). It returns true: the boot is held.
func (s *RunnerService) drift(ctx context.Context, m measured, d *attestation.PCRMismatch, why string) bool {
	node, run, rec := m.node, m.run, m.rec
	detail := fmt.Sprintf("firmware measurement drift on node %s %s: %s (node record of run %s for SKU %s, firmware %q; this boot reports firmware %q)",
		node.ID, why, d, cmp.Or(rec.RunID, "(none)"), node.SKU, rec.Firmware, m.fw)
	s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: m.peerIP, RunID: run.ID, Nodes: []string{node.ID}, Action: audit.FirmwareDrift,
		Result: "held", Detail: textsafe.BoundedLine(detail, maxMessage)})
	_ = s.Store.PutVerdict(ctx, store.Verdict{RunID: run.ID, Component: fmt.Sprintf("tpm/pcr%d", d.PCR), Check: "firmware_measurement",
		Status: curev1.VerdictStatus_FAIL, Expected: textsafe.Bounded(d.Expected, 1024), Observed: d.Observed, Message: textsafe.Bounded(detail, maxMessage), Time: m.now})
	msg := detail + fmt.Sprintf(": the node is held out of service (this boot is not admitted) until an admin runs `curectl nodes accept-measurements %s --reason ...`", node.ID)
	if err := s.Store.HoldFirmware(ctx, node.ID, store.MeasurementHold{RunID: run.ID, Detail: textsafe.BoundedLine(detail, maxMessage), At: m.now, PCRs: m.vals, Firmware: m.fw}); err != nil {
		m.log.Error("firmware measurement hold not recorded: this boot is not admitted, the next is judged again", "err", err)
		msg += fmt.Sprintf(" (the hold was not recorded: %v)", err)
	}
	s.info(ctx, m, msg)
	if s.OnMeasurementDrift != nil {
		s.OnMeasurementDrift(ctx, node.ID, run.ID, detail)
	}
	return true
}

func formatPCRs(vals map[string]string) string {
	var b strings.Builder
	for p := range 24 {
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
