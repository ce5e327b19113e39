package pipeline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/runner/attestation"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/swtpmtest"
	"github.com/google/go-tpm/tpm2/transport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nodeTPM is the node's TPM: a real swtpm whose state survives the node's
// reboots (same EK); each boot of the machine restarts it (PCRs reset) and
// plays the firmware's measurements into it and its event log.
type nodeTPM struct {
	t  *testing.T
	sw *swtpmtest.TPM

	mu sync.Mutex
	fw string // what the firmware measures into PCR 0
	// bios, when set, is the BIOS version the machine runs at boot: it
	// is measured too, so a flash changes PCR 0 as on a real machine.
	bios   func() string
	booted int // the machine boot the TPM was last measured for
	log    []byte
}

func newNodeTPM(t *testing.T, fw string) *nodeTPM {
	return &nodeTPM{t: t, sw: swtpmtest.Start(t, ""), fw: fw}
}

func (n *nodeTPM) setFirmware(fw string) {
	n.mu.Lock()
	n.fw = fw
	n.mu.Unlock()
}

// boot makes the TPM's state that of machine boot number boot.
func (n *nodeTPM) boot(boot int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.booted == boot {
		return // a reconnect of the same boot
	}
	n.booted = boot
	n.sw.Restart()
	b := n.sw.Measure()
	app := sha256.Sum256([]byte("cure image"))
	fw := n.fw
	if n.bios != nil {
		fw += " bios " + n.bios()
	}
	b.Firmware(fw, app[:])
	n.log = b.Log.Bytes()
}

type nopClose struct{ transport.TPM }

func (nopClose) Close() error { return nil }

func (n *nodeTPM) source() attestation.Source {
	return attestation.Source{
		Open: func() (transport.TPMCloser, error) { return nopClose{n.sw.Open()}, nil },
		EventLog: func() ([]byte, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.log, nil
		},
	}
}

// requiredSetup is what a site requiring attestation has: the image's
// report.json naming the UKI the node boots (its Authenticode hash) and,
// without --ek-roots, the node's EK pinned in the nodes file.
func (n *nodeTPM) requiredSetup(f *fixture, nodeID string) {
	n.t.Helper()
	app := sha256.Sum256([]byte("cure image"))
	img := filepath.Join(f.dir, "image")
	if err := os.MkdirAll(img, 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img, "report.json"), []byte(`{"kind":"image","uki":{"authenticode_sha256":"`+hex.EncodeToString(app[:])+`"}}`), 0o644); err != nil {
		n.t.Fatal(err)
	}
	k, err := attest.NewKeys(n.sw.Open())
	if err != nil {
		n.t.Fatal(err)
	}
	defer k.Close()
	fp, err := attest.EKFingerprint(k.EKPublic)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := f.st.PinEK(context.Background(), nodeID, fp, time.Now()); err != nil {
		n.t.Fatal(err)
	}
}

// genuine is the real runner's attestation (runner/attestation) of the
// node's TPM.
func (n *nodeTPM) genuine(f *fixture) func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation {
	return func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation {
		n.boot(boot)
		return attestation.Attest(ctx, n.source(), f.client, token, bootID)
	}
}

// keys are the TPM's EK and AK, for runners that answer challenges by hand.
func (n *nodeTPM) keys(boot int) *attest.Keys {
	n.t.Helper()
	n.boot(boot)
	k, err := attest.NewKeys(n.sw.Open())
	if err != nil {
		n.t.Fatal(err)
	}
	return k
}

func attestationStatuses(t *testing.T, st *store.Store, runID string) []string {
	t.Helper()
	as, err := st.RunAttestations(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.Status+": "+a.Detail)
	}
	return out
}

// awaitSecurityEvents is securityEvents once at least one is there, or
// what there is when wait has passed.
func awaitSecurityEvents(t *testing.T, st *store.Store, runID, action string, wait time.Duration) []store.AuditEntry {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if d := securityEvents(t, st, runID, action); len(d) > 0 || time.Now().After(deadline) {
			return d
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func securityEvents(t *testing.T, st *store.Store, runID, action string) []store.AuditEntry {
	t.Helper()
	es, err := st.AuditLog(context.Background(), store.AuditFilter{Kind: store.AuditSecurity, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, e := range es {
		if e.RunID == runID && e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

// TestAttestationRequiredForSecrets: on a SKU that requires attestation, a
// runner that skips the quote, quotes another nonce, replays an earlier
// boot's quote, or answers with another TPM's keys gets no assignment, so
// no PSID and no host token, and what it sends unasked (phase ends,
// verdicts) is kept as unattested and ends nothing; the run cannot
// succeed. The node's own TPM, through the real runner code, gets them.
func TestAttestationRequiredForSecrets(t *testing.T) {
	f := newFixtureCfg(t, func(sku *manifests.SKU, _ string) { sku.Spec.Attestation = manifests.AttestationRequired }, nil,
		func(c *pipeline.Config) { c.Timeouts.WaitForCURE = 3 * time.Second })
	node := newNodeTPM(t, "fw-1.0")
	node.requiredSetup(f, "node1")
	ctx := context.Background()

	// The node's own TPM, through runner/attestation: attested, secrets handed.
	f.mu.Lock()
	f.attest = node.genuine(f)
	f.mu.Unlock()
	run1, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(run1); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("attested run ended %s: %s (attestations %v)", r.Status, r.Message, attestationStatuses(t, f.st, run1))
	}
	f.mu.Lock()
	var psids, hostToken bool
	for _, a := range f.assignments {
		psids = psids || len(a.GetPsids()) > 0
		hostToken = hostToken || a.GetFirstBoot().GetCallbackToken() != ""
	}
	captured := f.hellos[0].GetAttestation()
	f.assignments, f.hellos, f.hostToken = nil, nil, ""
	f.mu.Unlock()
	if !psids || !hostToken {
		t.Fatalf("attested boot: PSIDs %t, host token %t; want both", psids, hostToken)
	}
	for _, s := range attestationStatuses(t, f.st, run1) {
		if !strings.HasPrefix(s, store.AttestPassed) {
			t.Fatalf("attested run's boot: %s", s)
		}
	}
	ek, err := f.st.NodeEK(ctx, "node1")
	if err != nil || ek.Source != store.EKPinned {
		t.Fatalf("EK after the first attested boot: %+v %v; want the pinned one (a required SKU without --ek-roots enrols none on first use)", ek, err)
	}
	if captured.GetChallengeId() == "" || len(captured.GetQuote()) == 0 {
		t.Fatalf("no quote captured: %v", captured)
	}

	other := swtpmtest.Start(t, "") // another machine's TPM, in the attacker's hands
	otherKeys, err := attest.NewKeys(other.Open())
	if err != nil {
		t.Fatal(err)
	}
	nodeKeys := node.keys(-1)
	nodeEK := nodeKeys.EKPublic
	nodeKeys.Close()

	// answer runs a challenge exchange by hand with the given keys.
	answer := func(ctx context.Context, token, bootID string, ekPub, akPub []byte, activate func(blob, enc []byte) ([]byte, error),
		quote func(nonce []byte, pcrs []uint32) (*attest.Quote, error)) *curev1.Attestation {
		ch, err := f.client.BeginAttestation(ctx, &curev1.AttestBegin{Token: token, BootId: bootID, EkPublic: ekPub, AkPublic: akPub})
		if status.Code(err) == codes.PermissionDenied && !bytes.Equal(ekPub, nodeEK) {
			// Another EK than the node's pinned one gets no challenge at
			// all: what the runner sends then is its refusal.
			return &curev1.Attestation{Error: err.Error()}
		}
		if err != nil {
			t.Errorf("BeginAttestation: %v", err)
			return nil
		}
		secret, err := activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
		if err != nil {
			secret = make([]byte, 32) // it cannot: a guess
			_, _ = rand.Read(secret)
		}
		q, err := quote(ch.GetNonce(), ch.GetPcrs())
		if err != nil {
			t.Errorf("quote: %v", err)
			return nil
		}
		return &curev1.Attestation{ChallengeId: ch.GetChallengeId(), ActivatedSecret: secret, Quote: q.Attest, Signature: q.Signature, Pcrs: q.PCRs}
	}

	cases := []struct {
		name   string
		attest func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation
		action string // the security event it must raise
		detail string
	}{
		{"skips the quote", func(context.Context, string, string, int) *curev1.Attestation { return nil }, audit.AttestationMissing, "must attest"},
		{"wrong nonce", func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation {
			k := node.keys(boot)
			defer k.Close()
			return answer(ctx, token, bootID, k.EKPublic, k.AKPublic, k.Activate, func(_ []byte, pcrs []uint32) (*attest.Quote, error) {
				return k.Quote([]byte("a nonce of the runner's choosing"), pcrs)
			})
		}, audit.AttestationFailed, "nonce"},
		{"replayed quote", func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation {
			if boot%2 == 1 {
				return captured // verbatim: its challenge was used by the boot it came from
			}
			// Under a fresh challenge of its own, with the old quote and secret.
			k := node.keys(boot)
			defer k.Close()
			return answer(ctx, token, bootID, k.EKPublic, k.AKPublic, func([]byte, []byte) ([]byte, error) { return captured.GetActivatedSecret(), nil },
				func([]byte, []uint32) (*attest.Quote, error) {
					return &attest.Quote{Attest: captured.GetQuote(), Signature: captured.GetSignature(), PCRs: captured.GetPcrs()}, nil
				})
		}, audit.AttestationFailed, ""},
		{"another TPM's key", func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation {
			if boot%2 == 1 {
				// The node's EK (public) claimed with the attacker's AK: the
				// credential is sealed to an EK the attacker's TPM lacks.
				return answer(ctx, token, bootID, nodeEK, otherKeys.AKPublic, otherKeys.Activate, otherKeys.Quote)
			}
			// The attacker's TPM throughout: genuine, but not the node's EK.
			return answer(ctx, token, bootID, otherKeys.EKPublic, otherKeys.AKPublic, otherKeys.Activate, otherKeys.Quote)
		}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.mu.Lock()
			f.attest = c.attest
			// A hostile runner does not wait to be asked: it reports the
			// gate passed and the disks revert done.
			f.forge = func(boot int, emit func(string, *curev1.Event)) {
				for _, ph := range []modes.PhaseName{modes.Hardware, modes.SEDRevert} {
					emit(string(ph), &curev1.Event{Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}})
					emit(string(ph), &curev1.Event{Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "forged/0", Check: "forged", Status: curev1.VerdictStatus_PASS}}})
					emit(string(ph), &curev1.Event{Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{Status: curev1.PhaseStatus_PHASE_OK, Message: "forged"}}})
				}
			}
			f.mu.Unlock()
			runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
			if err != nil {
				t.Fatal(err)
			}
			r := f.waitRun(runID)
			if r.Status == curev1.RunStatus_RUN_SUCCEEDED {
				t.Errorf("run succeeded without an attested boot")
			}
			f.mu.Lock()
			for _, a := range f.assignments {
				t.Errorf("assignment sent to an unattested boot: phases %v, %d PSIDs, host token %t", a.GetPhases(), len(a.GetPsids()), a.GetFirstBoot().GetCallbackToken() != "")
			}
			boots := len(f.hellos)
			f.assignments, f.hellos = nil, nil
			f.mu.Unlock()
			if boots == 0 {
				t.Fatal("no boot reached the coordinator")
			}
			st := attestationStatuses(t, f.st, runID)
			if len(st) == 0 {
				t.Fatal("no boot's attestation recorded")
			}
			for _, s := range st {
				if strings.HasPrefix(s, store.AttestPassed) {
					t.Errorf("boot attested: %s", s)
				}
			}
			t.Logf("boots judged: %v", st)
			vs, err := f.st.Verdicts(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				if v.Component == "forged/0" {
					t.Errorf("forged verdict stored as a verdict: %+v", v)
				}
			}
			ps := f.phases(runID)
			for _, ph := range []modes.PhaseName{modes.Hardware, modes.SEDRevert} {
				if p, ok := ps[ph]; ok && p.Status == curev1.PhaseStatus_PHASE_OK {
					t.Errorf("forged phase end counted: %s %s", ph, p.Status)
				}
			}
			evs, err := f.st.Events(ctx, runID, 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			kept := 0
			for _, e := range evs {
				if e.Status == "UNATTESTED" {
					kept++
				}
			}
			if kept == 0 {
				t.Error("the unattested boot's events were not kept")
			}
			actions := []string{audit.AttestationFailed, audit.AttestationMissing, audit.EKMismatch}
			if c.action != "" {
				actions = []string{c.action}
			}
			var found []store.AuditEntry
			for _, a := range actions {
				found = append(found, securityEvents(t, f.st, runID, a)...)
			}
			if len(found) == 0 {
				t.Fatalf("no security event %v for the run", actions)
			}
			if c.detail != "" && !slices.ContainsFunc(found, func(e store.AuditEntry) bool { return strings.Contains(e.Detail, c.detail) }) {
				t.Errorf("security events %v do not say %q", found, c.detail)
			}
		})
	}
	otherKeys.Close()
	if t.Failed() {
		return
	}
	// Still the node's own TPM afterwards: attested again, secrets again.
	f.mu.Lock()
	f.attest, f.forge = node.genuine(f), nil
	f.mu.Unlock()
	run2, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(run2); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("the node's own TPM after the forgeries: run ended %s: %s (%v)", r.Status, r.Message, attestationStatuses(t, f.st, run2))
	}
}

// TestFirmwareMeasurementDrift: the first attested boot records the node's
// firmware PCRs; a later boot whose PCR 0 differs while the pipeline
// changed no firmware is flagged (security event, FAIL verdict naming the
// PCR with both values) and holds the node: the run cannot proceed. Once
// an admin accepted the new values, a BIOS flash the pipeline made
// re-records them on the next boot, unflagged.
func TestFirmwareMeasurementDrift(t *testing.T) {
	// A held boot is never admitted: its run fails at wait_for_cure.
	f := newFixtureCfg(t, nil, nil, func(c *pipeline.Config) { c.Timeouts.WaitForCURE = 5 * time.Second })
	ctx := context.Background()
	node := newNodeTPM(t, "platform firmware")
	node.bios = func() string { v, _, _ := f.bmc.FirmwareVersion("BIOS"); return v }
	f.mu.Lock()
	f.attest = node.genuine(f)
	f.mu.Unlock()
	provision := func() (string, store.Run) {
		t.Helper()
		runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return runID, f.waitRun(runID)
	}

	run1, r := provision()
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("first run ended %s: %s", r.Status, r.Message)
	}
	rec1, err := f.st.GetFirmwareRecord(ctx, "node1")
	if err != nil || rec1.RunID != run1 || len(rec1.PCRs) != len([]int{0, 1, 2, 3, 4, 7}) || rec1.Firmware != "2.19.1" || rec1.SKU != "qemu-nvme" {
		t.Fatalf("record after the first attested boot: %+v %v", rec1, err)
	}

	// Second boot: PCR 0 measured differently (another firmware image
	// under the same version string), and the pipeline flashed nothing.
	node.setFirmware("platform firmware, patched")
	run2, r := provision()
	if r.Status == curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("the drifted node's run succeeded: %s", r.Message)
	}
	drift := securityEvents(t, f.st, run2, audit.FirmwareDrift)
	if len(drift) == 0 {
		t.Fatal("firmware drift not flagged as a security event")
	}
	if d := drift[0].Detail; !strings.Contains(d, "PCR 0") || !strings.Contains(d, rec1.PCRs["0"]) {
		t.Errorf("drift event does not name PCR 0 and its recorded value %s: %s", rec1.PCRs["0"], d)
	}
	vs, err := f.st.Verdicts(ctx, run2)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(vs, func(v store.Verdict) bool { return v.Component == "tpm/pcr0" && v.Check == "firmware_measurement" })
	if i < 0 {
		t.Fatalf("no firmware_measurement verdict for PCR 0 in %+v", vs)
	}
	if v := vs[i]; v.Status != curev1.VerdictStatus_FAIL || v.Expected != rec1.PCRs["0"] || v.Observed == rec1.PCRs["0"] || len(v.Observed) != 64 {
		t.Errorf("PCR 0 verdict %+v, want FAIL expected %s and the new value", v, rec1.PCRs["0"])
	}
	if rec, _ := f.st.GetFirmwareRecord(ctx, "node1"); rec.RunID != run1 || rec.PCRs["0"] != rec1.PCRs["0"] || rec.Hold.RunID != run2 {
		t.Errorf("a drift re-recorded the measurements, or did not hold the node: %+v", rec)
	}
	// The patched firmware is legitimate: an admin accepts it.
	if _, err := f.st.AcceptMeasurements(ctx, "node1", time.Now()); err != nil {
		t.Fatal(err)
	}

	// Third run: the SKU now pins a newer BIOS, which the pipeline
	// flashes: the boot after the flash measures new firmware that no
	// node of the SKU is known to produce, so the node is held for an
	// admin (a flash is no licence for any measurement).
	raw, err := os.ReadFile(filepath.Join(f.dir, "manifests", "qemu-nvme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sku, err := manifests.ParseSKU("qemu-nvme.yaml", raw)
	if err != nil {
		t.Fatal(err)
	}
	sku.Spec.Firmware = append(sku.Spec.Firmware, manifests.Firmware{Name: "bios", Component: "bios", Via: "redfish", Match: manifests.Match{RedfishID: "BIOS"},
		Version: "2.21.2", Gate: "equal", Artifact: fwPackage(t, filepath.Join(f.dir, "artifacts", "sha256"), "BIOS", "2.21.2"), Activation: "host-reboot"})
	if raw, err = manifests.Marshal(sku); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "manifests", "qemu-nvme.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// (The run itself may end well: the held boot after the flash is not
	// admitted, but the phases left may need no runner; the hold stands
	// and the coordinator's drift hook quarantines the node.)
	run3, _ := provision()
	if v, _, _ := f.bmc.FirmwareVersion("BIOS"); v != "2.21.2" {
		t.Fatalf("BIOS not flashed: %s", v)
	}
	// The held boot's attestation may come after the run has ended (the
	// phases left needed no runner): wait for its event rather than read once.
	if d := awaitSecurityEvents(t, f.st, run3, audit.FirmwareDrift, 30*time.Second); len(d) == 0 || !strings.Contains(d[0].Detail, "after the firmware change run "+run3) ||
		!strings.Contains(d[0].Detail, "no other node of the SKU is known") {
		t.Fatalf("firmware_drift events of the unknown flash %+v: want one naming the change and that no node of the SKU is known", d)
	}
	if rec, _ := f.st.GetFirmwareRecord(ctx, "node1"); rec.Hold.RunID != run3 || rec.ChangeRun != run3 {
		t.Fatalf("after the unknown flash: %+v, want held by %s with the change still noted", rec, run3)
	}

	// Another node of the SKU is known to produce these values on 2.21.2
	// (here: the same firmware measured on another TPM): the next boot
	// after the pipeline's flash matches it and re-records, the hold ends.
	other := newNodeTPM(t, "platform firmware, patched")
	other.bios = func() string { return "2.21.2" }
	other.boot(1)
	vals, err := attest.ReadPCRs(other.sw.Open(), []uint32{0, 2, 3, 4, 7})
	if err != nil {
		t.Fatal(err)
	}
	knownVals := map[string]string{}
	for p, v := range vals {
		knownVals[strconv.Itoa(int(p))] = hex.EncodeToString(v)
	}
	if err := f.st.AddSKUPCRs(ctx, store.KnownPCRs{SKU: "qemu-nvme", Firmware: "2.21.2", PCRs: knownVals, NodeID: "node2", RunID: "elsewhere", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	run4, r := provision()
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run after the SKU's values became known ended %s: %s", r.Status, r.Message)
	}
	if d := securityEvents(t, f.st, run4, audit.FirmwareDrift); len(d) != 0 {
		t.Errorf("the pipeline's own BIOS flash, as known on the SKU, flagged as drift: %+v", d)
	}
	rec4, err := f.st.GetFirmwareRecord(ctx, "node1")
	if err != nil || rec4.RunID != run4 || rec4.Firmware != "2.21.2" || rec4.PCRs["0"] != knownVals["0"] || rec4.ChangeRun != "" || rec4.Held() {
		t.Fatalf("record after the pipeline's flash: %+v %v (known %v)", rec4, err, knownVals)
	}
	evs, err := f.st.Events(ctx, run4, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e store.Event) bool {
		return strings.Contains(e.Message, "re-recorded after the firmware change run "+run3) && strings.Contains(e.Message, "hold of run "+run3+" ends")
	}) {
		t.Error("no event says the measurements were re-recorded after the pipeline's change and the hold ended")
	}
}
