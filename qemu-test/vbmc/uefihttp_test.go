package vbmc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/uefi"
)

// A BMC with UEFI HTTP boot offers the UefiHttp target and HttpBootUri,
// validates the URI, and hands it to the machine at the next boot, once.
func TestUefiHttpBootOverride(t *testing.T) {
	b, m := newFakeBMC(t, Config{Name: "n1", BootModes: []string{ModeUEFI}, UefiHTTP: true})
	s := decode(t, do(t, b, "GET", sys, "", ""))
	boot := s["Boot"].(map[string]any)
	if !slices.Contains(boot["BootSourceOverrideTarget@Redfish.AllowableValues"].([]any), any("UefiHttp")) {
		t.Fatalf("UefiHttp not offered: %v", boot["BootSourceOverrideTarget@Redfish.AllowableValues"])
	}
	if _, ok := boot["HttpBootUri"]; !ok {
		t.Fatal("no HttpBootUri property")
	}
	if rec := do(t, b, "PATCH", sys, "", `{"Boot":{"HttpBootUri":"ftp://x/cure.efi"}}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "HttpBootUri") {
		t.Fatalf("ftp URI: %d %s", rec.Code, rec.Body)
	}
	const uri = "https://10.0.2.2:8443/image/cure.efi"
	rec := do(t, b, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideTarget":"UefiHttp","BootSourceOverrideEnabled":"Once","HttpBootUri":"`+uri+`"}}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("PATCH UefiHttp: %d %s", rec.Code, rec.Body)
	}
	if got := decode(t, rec)["Boot"].(map[string]any)["HttpBootUri"]; got != uri {
		t.Errorf("HttpBootUri = %v", got)
	}
	if rec := do(t, b, "POST", sys+"/Actions/ComputerSystem.Reset", "", `{"ResetType":"On"}`); rec.Code != http.StatusNoContent {
		t.Fatalf("power on: %d %s", rec.Code, rec.Body)
	}
	if got := m.Boots(); !slices.Equal(got, []BootDevice{BootUefiHttp}) {
		t.Errorf("boots = %v, want [UefiHttp]", got)
	}
	if got := m.HTTPBootURIs(); !slices.Equal(got, []string{uri}) {
		t.Errorf("URIs = %v", got)
	}
	if tgt, en := b.BootOverride(); tgt != "UefiHttp" || en != "Disabled" {
		t.Errorf("after the boot: %s/%s, want the Once consumed", tgt, en)
	}

	// Without the option the target is refused as any unknown one.
	b2, _ := newFakeBMC(t, Config{Name: "n2"})
	if rec := do(t, b2, "PATCH", sys, "", `{"Boot":{"BootSourceOverrideTarget":"UefiHttp"}}`); rec.Code != http.StatusBadRequest {
		t.Errorf("UefiHttp on a BMC without it: %d", rec.Code)
	}
}

// The QEMU machine realises HttpBootUri as EDK2 would: a URI boot option
// on its NIC and BootNext, in its own variable store; the Secure Boot db
// gets the site certificate.
func TestQEMUArmsHTTPBoot(t *testing.T) {
	const vars = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	if _, err := os.Stat(vars); err != nil {
		t.Skip("ovmf not installed")
	}
	if _, err := os.Stat("/usr/bin/qemu-system-x86_64"); err != nil {
		t.Skip("qemu not installed")
	}
	dir := t.TempDir()
	cert := testCertDER(t)
	q, err := NewQEMUMachine(QEMUConfig{Name: "n1", MAC: "52:54:00:c0:de:01", ConsoleLog: filepath.Join(dir, "con"), RunDir: dir,
		OVMFCode: "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", OVMFVars: vars, SecureBoot: true, SecureBootDB: [][]byte{cert}, HTTPSCACerts: [][]byte{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close(context.Background())
	if err := q.SetBootMode(ModeUEFI); err != nil {
		t.Fatal(err)
	}
	if err := q.SetHTTPBootURI("https://10.0.2.2:8443/image/cure.efi"); err != nil {
		t.Fatal(err)
	}
	if err := q.ensureVars(); err != nil {
		t.Fatal(err)
	}
	if err := q.armHTTPBoot(BootUefiHttp); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(q.varsPath())
	vs, err := uefi.ParseVarStore("vars", b)
	if err != nil {
		t.Fatal(err)
	}
	next, ok := vs.Get("BootNext", uefi.GlobalVariable)
	if !ok || len(next.Data) != 2 || next.Data[0] != 0 || next.Data[1] != 1 {
		t.Errorf("BootNext = %v %x", ok, next.Data)
	}
	opt, ok := vs.Get("Boot0100", uefi.GlobalVariable)
	if !ok || !strings.Contains(string(opt.Data), "https://10.0.2.2:8443/image/cure.efi") {
		t.Errorf("Boot0100 = %v %q", ok, opt.Data)
	}
	db, ok := vs.Get("db", uefi.ImageSecurityDatabase)
	if !ok || !strings.Contains(string(db.Data), string(cert)) || db.Attrs != 0x27 {
		t.Errorf("db: found %v, attrs %#x, holds the site certificate: %v", ok, db.Attrs, strings.Contains(string(db.Data), string(cert)))
	}
	args, err := q.Args(BootUefiHttp, filepath.Join(dir, "qmp"))
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"q35,smm=on", "driver=cfi.pflash01,property=secure,value=on", "name=etc/edk2/https/cacerts,file=", "addr=0x1,", "bootindex=1"} {
		if !strings.Contains(line, want) {
			t.Errorf("QEMU command line lacks %q: %s", want, line)
		}
	}
	esl, _ := os.ReadFile(q.cacertsPath())
	want, _ := uefi.SignatureList(vbmcOwner, cert)
	if string(esl) != string(want) {
		t.Error("fw_cfg cacerts file is not the CA's signature list")
	}
}

func testCertDER(t *testing.T) []byte {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "site"}, NotBefore: time.Unix(0, 0), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
