package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	runnerattest "github.com/cure-oss/cure/runner/attestation"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/google/go-tpm/tpm2/transport"
)

// imagePolicy is a SKU that requires attestation, booting the image uki.
type imagePolicy struct{ uki *imagereport.UKI }

func (p imagePolicy) ImageUKI() *imagereport.UKI                       { return p.uki }
func (imagePolicy) Required(context.Context, store.Node) (bool, error) { return true, nil }

// bootApps restarts the TPM and measures a boot that started each of apps
// (Authenticode hashes, in order) before ExitBootServices.
func (n *attestTPM) bootApps(fw string, apps ...[]byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sw.Restart()
	b := n.sw.Measure()
	b.Apps(fw, apps...)
	n.log = b.Log.Bytes()
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func securityEvents(t *testing.T, st *store.Store, action string) []store.AuditEntry {
	t.Helper()
	es, err := st.AuditLog(context.Background(), store.AuditFilter{Kind: store.AuditSecurity, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, e := range es {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

// TestForeignBootAppRefused: the node's own TPM (swtpm) measures a boot in
// which another EFI application started before the signed CURE image; the
// image's Authenticode hash is in the log, the quote is genuine and the log
// replays to it, and the coordinator's judge refuses the boot naming PCR 4
// and the foreign application's event (index, type, digest): an
// attestation_failed security event, a FAIL verdict tpm/pcr4, and the boot
// is not admitted. The same node booting the image alone is admitted.
func TestForeignBootAppRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts swtpm")
	}
	ctx := context.Background()
	st := openStore(t)
	image := sha256.Sum256([]byte("cure image")) // what attestTPM.boot starts
	c := startAttestCoord(t, st, t.TempDir(), "", func(rs *server.RunnerService) {
		rs.Attestation = imagePolicy{uki: &imagereport.UKI{AuthenticodeSHA256: hex.EncodeToString(image[:])}}
	}, nil)
	node := newAttestTPM(t)
	node.pin(t, st)
	bootRun := func(runID string, measure func()) (store.BootAttestation, bool) {
		t.Helper()
		return attestedBoot(t, ctx, c, st, node, runID, measure)
	}
	if ba, admitted := bootRun("run-image", func() { node.boot("platform firmware") }); ba.Status != store.AttestPassed || !admitted {
		t.Fatalf("the image alone: %s (%s), admitted %t; want attested and admitted", ba.Status, ba.Detail, admitted)
	}

	foreign := sha256.Sum256([]byte("vendor shell"))
	ba, admitted := bootRun("run-foreign", func() { node.bootApps("platform firmware", foreign[:], image[:]) })
	// Events 1-14 are the firmware's (swtpmtest.Boot.Apps), 15 the shell.
	want := fmt.Sprintf("PCR 4: event 15 (EV_EFI_BOOT_SERVICES_APPLICATION, sha256 %x)", foreign)
	if ba.Status != store.AttestFailed || admitted || !strings.Contains(ba.Detail, want) {
		t.Fatalf("a foreign application before the image: %s (%s), admitted %t; want failed naming %q, not admitted", ba.Status, ba.Detail, admitted, want)
	}
	var named bool
	for _, e := range securityEvents(t, st, audit.AttestationFailed) {
		named = named || e.RunID == "run-foreign" && strings.Contains(e.Detail, want)
	}
	if !named {
		t.Errorf("no attestation_failed security event of run-foreign naming %q: %+v", want, securityEvents(t, st, audit.AttestationFailed))
	}
	vs, err := st.Verdicts(ctx, "run-foreign")
	if err != nil {
		t.Fatal(err)
	}
	var verdict bool
	for _, v := range vs {
		verdict = verdict || v.Component == "tpm/pcr4" && v.Status.String() == "FAIL" && strings.Contains(v.Observed, want)
	}
	if !verdict {
		t.Errorf("no FAIL verdict tpm/pcr4 observing %q: %+v", want, vs)
	}
}

// TestAttestedSessionNeedsEK: a peer on the provisioning network with the
// node's boot token and a TPM of its own (its own swtpm and EK, certified
// by the same trusted manufacturer as the node's) gets nothing, on a node
// whose EK is pinned and on one whose EK was enrolled: BeginAttestation
// refuses its EK (so it has no challenge to answer), its session is not
// admitted (no assignment, so no PSID and no host token), its verdicts are
// not kept, and the node's EK record is unchanged.
func TestAttestedSessionNeedsEK(t *testing.T) {
	if testing.Short() {
		t.Skip("starts swtpm")
	}
	ctx := context.Background()
	maker := newEKCA(t, "Test TPM Manufacturer Root")
	roots, err := attestation.LoadEKRoots(maker.rootsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	node, peer := newAttestTPM(t), newAttestTPM(t)
	node.writeEKCert(maker.ekCert(t, ekKey(t, node.ekPublic())))
	peer.writeEKCert(maker.ekCert(t, ekKey(t, peer.ekPublic())))
	nodeEK, err := attest.EKFingerprint(node.ekPublic())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		source string
	}{{"pinned EK", store.EKPinned}, {"enrolled EK", store.EKTrustOnFirstUse}} {
		t.Run(c.name, func(t *testing.T) {
			st := openStore(t)
			coord := startAttestCoord(t, st, t.TempDir(), "", func(rs *server.RunnerService) { rs.EKRoots = roots }, nil)
			if c.source == store.EKPinned {
				node.pin(t, st)
			} else {
				// The node's first boot enrols its EK (its certificate chains).
				token := nodeRun(t, st, "run-enrol")
				node.boot("platform firmware")
				if _, err := hello(t, coord.runner(), token, "boot-enrol", node.attest(ctx, coord.runner(), token, "boot-enrol")); err != nil {
					t.Fatal(err)
				}
				if ba, admitted := bootVerdict(t, coord, "run-enrol", "boot-enrol"); ba.Status != store.AttestPassed || !admitted {
					t.Fatalf("the node's enrolling boot: %s (%s), admitted %t", ba.Status, ba.Detail, admitted)
				}
				endRun(t, st, "run-enrol")
			}

			token := nodeRun(t, st, "run-peer")
			peer.boot("platform firmware")
			a := runnerattest.Attest(ctx, runnerattest.Source{
				Open:     func() (transport.TPMCloser, error) { return keepOpen{peer.sw.Open()}, nil },
				EventLog: func() ([]byte, error) { return peer.log, nil },
			}, coord.runner(), token, "boot-peer")
			if a.GetChallengeId() != "" || !strings.Contains(a.GetError(), "endorsement key refused") {
				t.Fatalf("the peer's exchange: challenge %q, error %q; want no challenge, its EK refused", a.GetChallengeId(), a.GetError())
			}
			stream, err := hello(t, coord.runner(), token, "boot-peer", a)
			if err != nil {
				t.Fatal(err)
			}
			ba, admitted := bootVerdict(t, coord, "run-peer", "boot-peer")
			if ba.Status == store.AttestPassed || admitted {
				t.Fatalf("the peer's boot: %s (%s), admitted %t; want not attested, not admitted", ba.Status, ba.Detail, admitted)
			}
			_ = send(stream, verdictEvent(1, "run-peer")) // kept apart, or refused
			vs, err := st.Verdicts(ctx, "run-peer")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				if !strings.HasPrefix(v.Component, "tpm") {
					t.Errorf("the peer's verdict was kept: %+v", v)
				}
			}
			if ek, err := st.NodeEK(ctx, attestNodeID); err != nil || ek.SHA256 != nodeEK || ek.Source != c.source {
				t.Fatalf("the node's EK after the peer: %+v %v; want %s, %s", ek, err, nodeEK, c.source)
			}
			if es := securityEvents(t, st, audit.EKMismatch); len(es) == 0 {
				t.Errorf("no ek_mismatch security event for the peer's TPM")
			}
		})
	}
}

// noImagePolicy is a SKU that requires attestation with no image report.
type noImagePolicy struct{}

func (noImagePolicy) ImageUKI() *imagereport.UKI                         { return nil }
func (noImagePolicy) Required(context.Context, store.Node) (bool, error) { return true, nil }

// TestAttestationNeedsImageReport: on a SKU that requires attestation, a
// coordinator whose image report is missing (or names no UKI) does not
// skip the image check: a genuine boot is refused as a configuration
// error naming the SKU and report.json, and is not admitted.
func TestAttestationNeedsImageReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts swtpm")
	}
	ctx := context.Background()
	st := openStore(t)
	c := startAttestCoord(t, st, t.TempDir(), "", func(rs *server.RunnerService) { rs.Attestation = noImagePolicy{} }, nil)
	node := newAttestTPM(t)
	node.pin(t, st)
	token := nodeRun(t, st, "run-noreport")
	node.boot("platform firmware")
	if _, err := hello(t, c.runner(), token, "boot1", node.attest(ctx, c.runner(), token, "boot1")); err != nil {
		t.Fatal(err)
	}
	ba, admitted := bootVerdict(t, c, "run-noreport", "boot1")
	if ba.Status != store.AttestFailed || admitted || !strings.Contains(ba.Detail, "configuration error: SKU "+attestSKUName) || !strings.Contains(ba.Detail, "report.json") {
		t.Fatalf("boot without an image report: %s (%s), admitted %t; want failed as a configuration error naming the SKU and report.json", ba.Status, ba.Detail, admitted)
	}
}

// TestBootPathAcceptedPerSKU: PCR 4 is kept with the firmware PCRs as the
// value a SKU's firmware version and image are known to produce. A boot
// whose path passes the boot path rule but whose PCR 4 differs from that
// value (here: a boot attempt retried by the firmware) is a drift like the
// firmware PCRs': held, not admitted, a FAIL verdict tpm/pcr4 with the
// known and observed values; an admin's accept makes it the node's own.
func TestBootPathAcceptedPerSKU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts swtpm")
	}
	ctx := context.Background()
	st := openStore(t)
	c := startAttestCoord(t, st, t.TempDir(), "", nil, nil)
	node := newAttestTPM(t)
	node.pin(t, st)
	image := sha256.Sum256([]byte("cure image"))
	retried := func() {
		node.mu.Lock()
		defer node.mu.Unlock()
		node.sw.Restart()
		b := node.sw.Measure()
		b.Retried("platform firmware", 1, image[:])
		node.log = b.Log.Bytes()
	}
	bootRun := func(runID string, measure func()) (store.BootAttestation, bool) {
		t.Helper()
		return attestedBoot(t, ctx, c, st, node, runID, measure)
	}
	if ba, admitted := bootRun("run1", func() { node.boot("platform firmware") }); ba.Status != store.AttestPassed || !admitted {
		t.Fatalf("first boot: %s (%s), admitted %t", ba.Status, ba.Detail, admitted)
	}
	known, err := st.SKUPCRs(ctx, attestSKUName, "1.0", hex.EncodeToString(image[:]))
	if err != nil || len(known["4"]) != 64 || len(known["0"]) != 64 || known["1"] != "" {
		t.Fatalf("the SKU's known values after its first node: %v %v; want PCRs 0 and 4, never the node's own PCR 1", known, err)
	}
	ba, admitted := bootRun("run2", retried)
	if ba.Status != store.AttestPassed || admitted {
		t.Fatalf("a boot with another PCR 4: %s (%s), admitted %t; want attested (the path is allowed) and held", ba.Status, ba.Detail, admitted)
	}
	vs, err := st.Verdicts(ctx, "run2")
	if err != nil {
		t.Fatal(err)
	}
	var verdict bool
	for _, v := range vs {
		verdict = verdict || v.Component == "tpm/pcr4" && v.Check == "firmware_measurement" && v.Status.String() == "FAIL" && v.Expected == known["4"] && len(v.Observed) == 64 && v.Observed != known["4"]
	}
	if !verdict {
		t.Fatalf("no FAIL verdict tpm/pcr4 expecting the SKU's known %s: %+v", known["4"], vs)
	}
	if rec, _ := st.GetFirmwareRecord(ctx, attestNodeID); !rec.Held() || rec.Hold.RunID != "run2" || !strings.Contains(rec.Hold.Detail, "PCR 4") {
		t.Fatalf("record after the PCR 4 drift: %+v, want held by run2 naming PCR 4", rec)
	}
	if _, err := st.AcceptMeasurements(ctx, attestNodeID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ba, admitted := bootRun("run3", retried); ba.Status != store.AttestPassed || !admitted {
		t.Fatalf("the accepted boot path: %s (%s), admitted %t; want admitted", ba.Status, ba.Detail, admitted)
	}
	if again, _ := st.SKUPCRs(ctx, attestSKUName, "1.0", hex.EncodeToString(image[:])); again["4"] != known["4"] {
		t.Fatalf("one node's accepted PCR 4 changed the SKU's known value: %s, was %s", again["4"], known["4"])
	}
}
