package qemutest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/pe"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/tools/uefi"
)

// needSecureBoot fails the test when the verified-boot tools are missing.
func needSecureBoot(t *testing.T) {
	t.Helper()
	var missing []string
	for _, f := range []string{harness.OVMFSecureCode, harness.OVMFSecureVars} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, c := range []string{"swtpm", "sbsign", "sbattach", "mcopy", "faketime"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing %v: run scripts/install-deps.sh (ovmf, swtpm, sbsigntool, mtools, faketime)", missing)
	}
}

var pcrLine = regexp.MustCompile(`CURE-RUNNER: tpm pcrs sha256 ((?:\d+=[0-9a-f]{64} ?)+)`)

// TestSecureBootHTTPSProvision is verified network boot, end to end: the
// virtual BMC, asked for UefiHttp with an https:// HttpBootUri, boots its
// OVMF (Secure Boot enforcing, the site's signing certificate in db, a
// swtpm TPM) into the signed CURE image from the coordinator's HTTPS
// listener, the firmware verifying the server with the boot CA; the
// runner fetches its token over TLS and the node provisions to its
// installed OS (signed for Secure Boot too). The report says the node
// booted over uefi-https, the console that Secure Boot was enforced, and
// the TPM's PCRs are compared with report.json's predictions.
func TestSecureBootHTTPSProvision(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	needSecureBoot(t)
	env := startEnv(t, harness.Options{SecureHTTPS: true})
	n := env.Nodes[0]
	start := time.Now()
	rep := provisionAndWait(t, env, n.ID, false)
	t.Logf("provisioned in %s", time.Since(start).Round(time.Second))
	checkProvisioned(t, env, rep)
	if rep.GetBootPath() != "uefi-https" {
		t.Errorf("report boot_path = %q, want uefi-https", rep.GetBootPath())
	}
	var boots []string
	for _, b := range n.BMC.History() {
		boots = append(boots, string(b.Device)+"/"+b.Mode)
	}
	if !slices.Equal(boots, []string{"UefiHttp/UEFI", "Hdd/UEFI"}) {
		t.Errorf("boots = %v, want [UefiHttp/UEFI Hdd/UEFI]", boots)
	}
	uri := n.BMC.HTTPBootURI()
	if !strings.HasPrefix(uri, "https://10.0.2.2:") || !strings.HasSuffix(uri, "/image/cure.efi") {
		t.Errorf("HttpBootUri = %q, want the coordinator's HTTPS listener", uri)
	}
	con, err := os.ReadFile(n.Console)
	if err != nil {
		t.Fatal(err)
	}
	at := 0
	for _, s := range []string{
		"Start HTTP Boot over IPv4", "URI: " + uri, // OVMF's HTTP boot, TLS verified with the boot CA
		"EFI stub: UEFI Secure Boot is enabled.", "secureboot: Secure boot enabled", // the kernel saw enforcement
		"CURE-RUNNER: https boot option=Boot0100 uri=" + uri, "secureboot=true", // the runner read the SecureBoot variable
		"CURE-RUNNER: registered node=" + n.ID,
		"EFI stub: UEFI Secure Boot is enabled.", // the installed OS, signed, under the same enforcement
	} {
		i := strings.Index(string(con[at:]), s)
		if i < 0 {
			t.Errorf("console lacks %q after byte %d", s, at)
			continue
		}
		at += i + len(s)
	}
	// The boot attested under the coordinator's rules: its boot path
	// (OVMF's boot action and separator, the signed image alone, then
	// ExitBootServices) and its EK certificate, which chains to the
	// environment's test TPM manufacturer (--ek-roots).
	var attested bool
	for _, v := range rep.GetVerdicts() {
		attested = attested || v.GetComponent() == "tpm" && v.GetCheck() == "attestation" && v.GetStatus() == curev1.VerdictStatus_PASS
	}
	if !attested {
		t.Errorf("no PASS tpm attestation verdict in the report: %v", rep.GetVerdicts())
	}
	// The TPM's PCRs as the runner read them, against report.json.
	var r struct {
		UKI *imagereport.UKI `json:"uki"`
	}
	b, err := os.ReadFile(filepath.Join(env.Opts.Out, "image", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.UKI == nil {
		t.Fatalf("report.json has no uki record: %v", err)
	}
	m := pcrLine.FindSubmatch(con)
	if m == nil {
		t.Fatal("the runner printed no TPM PCRs: no TPM seen")
	}
	got := map[string]string{}
	for _, kv := range strings.Fields(string(m[1])) {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for pcr, want := range r.UKI.PCRs {
		if got[pcr] != want {
			t.Errorf("PCR %s = %s after the boot, report.json predicts %s", pcr, got[pcr], want)
		} else {
			t.Logf("PCR %s = %s, as predicted", pcr, want)
		}
	}
}

// TestTamperedImageRefused: a changed CURE image gets nothing. Under
// Secure Boot the firmware refuses it; with Secure Boot off it boots, but
// its TPM quote gives it away and the coordinator hands it no secret.
func TestTamperedImageRefused(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	needSecureBoot(t)
	t.Run("secure-boot", tamperedRefusedBySecureBoot)
	t.Run("secure-boot-off", tamperedBootsUnattested)
}

// tamperedRefusedBySecureBoot: OVMF enforcing Secure Boot with the site's
// certificate in db fetches, over verified HTTPS, the signed image with one
// byte changed, and the image re-signed with another key, and refuses both
// (the load fails with Access Denied, no kernel starts).
// TestSecureBootHTTPSProvision is the control: the untouched image boots
// under the same firmware and keys.
func tamperedRefusedBySecureBoot(t *testing.T) {
	out := outDir(t)
	img, err := os.ReadFile(filepath.Join(out, "image", "cure.efi"))
	if err != nil {
		t.Fatalf("the signed image: %v (make image builds it with out/pki's Secure Boot key)", err)
	}
	dir := t.TempDir()
	// One byte of the kernel section changed, signature kept.
	tampered := slices.Clone(img)
	tampered[len(tampered)/2] ^= 0x01
	// Signed with a key the firmware does not know.
	resigned := resignWithNewKey(t, dir, img)

	// The boot CA and the site's db certificate, from make pki.
	pkiDir := filepath.Join(out, "pki")
	sbCert := pemDER(t, filepath.Join(pkiDir, pki.SecureBootCertFile))
	bootCA := pemDER(t, filepath.Join(pkiDir, pki.BootCACertFile))
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{pki.BootCACertFile, pki.BootCAKeyFile} {
		b, err := os.ReadFile(filepath.Join(pkiDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(state, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := pki.BootTLSCert(state, []string{"10.0.2.2", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	var fetched atomic.Int32
	files := map[string][]byte{"/tampered.efi": tampered, "/resigned.efi": resigned}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodGet {
			fetched.Add(1)
		}
		w.Header().Set("Content-Type", "application/efi")
		http.ServeContent(w, r, "", time.Unix(0, 0), strings.NewReader(string(b)))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, CipherSuites: pki.FirmwareCipherSuites()}
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	boot := func(name string, want string) string {
		t.Helper()
		con := filepath.Join(dir, strings.TrimPrefix(name, "/")+".console")
		q, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{Name: "sb-" + strings.TrimSuffix(strings.TrimPrefix(name, "/"), ".efi"), MAC: "52:54:00:c0:de:51",
			ConsoleLog: con, RunDir: filepath.Join(dir, name+".run"), MemoryMiB: 1024,
			OVMFCode: harness.OVMFSecureCode, OVMFVars: harness.OVMFSecureVars, SecureBoot: true,
			SecureBootDB: [][]byte{sbCert}, HTTPSCACerts: [][]byte{bootCA}, TPM: true})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close(context.Background())
		if err := q.SetBootMode(vbmc.ModeUEFI); err != nil {
			t.Fatal(err)
		}
		if err := q.SetHTTPBootURI(fmt.Sprintf("https://10.0.2.2:%d%s", port, name)); err != nil {
			t.Fatal(err)
		}
		before := fetched.Load()
		if err := q.Start(context.Background(), vbmc.BootUefiHttp); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(6 * time.Minute)
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(con)
			if strings.Contains(string(b), "Boot0100") && strings.Contains(string(b), "failed to load Boot0100") && !strings.Contains(string(b), want) {
				t.Fatalf("%s: the boot failed otherwise than expected (want %q):\n%s", name, want, tail(b, 3000))
			}
			if strings.Contains(string(b), want) {
				if fetched.Load() == before {
					t.Errorf("%s: the firmware never fetched the image", name)
				}
				return string(b)
			}
			time.Sleep(time.Second)
		}
		b, _ := os.ReadFile(con)
		t.Fatalf("%s: console lacks %q after 6 minutes:\n%s", name, want, tail(b, 3000))
		return ""
	}
	for _, name := range []string{"/tampered.efi", "/resigned.efi"} {
		con := boot(name, "): Access Denied")
		if !strings.Contains(con, "failed to load Boot0100") || strings.Contains(con, "EFI stub:") || strings.Contains(con, "Linux version") {
			t.Errorf("%s: the firmware did not refuse it cleanly:\n%s", name, tail([]byte(con), 2000))
		}
	}
	// The untouched image boots this way: TestSecureBootHTTPSProvision.
}

// tamperedBootsUnattested: the same firmware with Secure Boot not enforced
// (no keys), a coordinator serving the signed image with one byte of its
// os-release section changed, beside the untouched image's report.json.
// The changed image boots and its runner attests with the node's swtpm; the
// quote's boot measurements (PCR 4 holds the image's Authenticode hash) do
// not match the report, so the coordinator records a security event naming
// the PCR with the expected and observed values, puts a FAIL verdict on the
// run, and hands the boot no assignment: no phase runs, so no PSID and no
// host token reach it, and the run does not succeed.
func tamperedBootsUnattested(t *testing.T) {
	out := outDir(t)
	src := filepath.Join(out, "image")
	img := filepath.Join(t.TempDir(), "image")
	if err := os.MkdirAll(img, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "cure.efi" {
			b = flipOSRelease(t, b)
		}
		if err := os.WriteFile(filepath.Join(img, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The SKU requires attestation, as a site running verified boot sets
	// it: an image that skipped its quote would be refused too.
	env := startEnv(t, harness.Options{SecureHTTPS: true, SecureBootOff: true, ImageDir: img,
		EditManifest: func(s *manifests.SKU) { s.Spec.Attestation = manifests.AttestationRequired }})
	n := env.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	runID, err := env.Provision(ctx, n.ID, modes.Provision, false)
	if err != nil {
		t.Fatal(err)
	}
	var ev *curev1.AuditEntry
	for ev == nil {
		resp, err := env.Client.ListAuditLog(ctx, &curev1.ListAuditLogRequest{Kind: "security", NodeId: n.ID})
		if err != nil {
			t.Fatalf("audit log: %v", err)
		}
		for _, e := range resp.GetEntries() {
			if e.GetAction() == audit.AttestationFailed {
				ev = e
			}
		}
		if ev != nil {
			break
		}
		select {
		case <-ctx.Done():
			con, _ := os.ReadFile(n.Console)
			t.Fatalf("no attestation_failed security event for the changed image:\n%s", tail(con, 3000))
		case <-time.After(2 * time.Second):
		}
	}
	t.Logf("security event: %s: %s", ev.GetAction(), ev.GetDetail())
	if !regexp.MustCompile(`PCR \d+: expected [0-9a-f]+.*observed`).MatchString(ev.GetDetail()) {
		t.Errorf("the security event does not name the PCR with expected and observed values: %s", ev.GetDetail())
	}
	con, err := os.ReadFile(n.Console)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"CURE-RUNNER: https boot option=", "secureboot=false"} {
		if !strings.Contains(string(con), s) {
			t.Errorf("console lacks %q: the changed image should boot with Secure Boot off", s)
		}
	}
	// The boot stays unassigned: give a wrongly admitted boot time to start
	// its first phase, then look.
	time.Sleep(20 * time.Second)
	rep, err := env.Report(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetRunStatus() == curev1.RunStatus_RUN_SUCCEEDED {
		t.Errorf("the run of the changed image succeeded")
	}
	plan, err := modes.For(modes.Provision)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.GetPhases() {
		if ph, ok := plan.Phase(modes.PhaseName(p.GetName())); ok && ph.Owner == modes.Runner && (p.GetStartedUnixMs() > 0 || p.GetPhaseStatus() != curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED) {
			t.Errorf("runner phase %s is %s: the unattested boot was assigned work", p.GetName(), p.GetStatus())
		}
	}
	var failed bool
	for _, v := range rep.GetVerdicts() {
		if strings.HasPrefix(v.GetComponent(), "tpm/pcr") && v.GetStatus() == curev1.VerdictStatus_FAIL {
			failed = true
			t.Logf("verdict %s %s: expected %s observed %s", v.GetComponent(), v.GetStatus(), v.GetExpected(), v.GetObserved())
		}
	}
	if !failed {
		t.Errorf("no tpm/pcrN FAIL verdict in the run's report")
	}
	if strings.Contains(string(con), "sed_revert") || strings.Contains(string(con), "os_install") {
		t.Errorf("the console shows a secret-bearing phase reached the changed image")
	}
}

// flipOSRelease changes one byte of a PE image's .osrel section (text the
// stub only measures), so the image still boots but its hash differs.
func flipOSRelease(t *testing.T, img []byte) []byte {
	t.Helper()
	f, err := pe.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".osrel")
	if s == nil || s.Size == 0 {
		t.Fatal("the image has no .osrel section")
	}
	out := slices.Clone(img)
	out[s.Offset] ^= 0x20 // a letter's case
	return out
}

// resignWithNewKey is img with its signature replaced by one from a fresh
// RSA key and self-signed certificate.
func resignWithNewKey(t *testing.T, dir string, img []byte) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: pkix.Name{CommonName: "not the site's key"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(k)
	key, cert := filepath.Join(dir, "other.key"), filepath.Join(dir, "other.pem")
	_ = os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	_ = os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	in, unsigned, outp := filepath.Join(dir, "in.efi"), filepath.Join(dir, "unsigned.efi"), filepath.Join(dir, "resigned.efi")
	if err := os.WriteFile(in, img, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"cp", in, unsigned}, {"sbattach", "--remove", unsigned},
		{"sbsign", "--key", key, "--cert", cert, "--output", outp, unsigned},
	} {
		if b, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, b)
		}
	}
	b, err := os.ReadFile(outp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pemDER(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ders, err := uefi.PEMCertificates(path, b)
	if err != nil {
		t.Fatal(err)
	}
	return ders[0]
}
