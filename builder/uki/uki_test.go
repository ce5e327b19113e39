package uki

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testKey writes an RSA Secure Boot key and self-signed certificate.
func testKey(t *testing.T, dir string) (key, cert string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CURE test Secure Boot"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	key, cert = filepath.Join(dir, "sb.key"), filepath.Join(dir, "sb.pem")
	kb, _ := x509.MarshalPKCS8PrivateKey(k)
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func needTools(t *testing.T) {
	t.Helper()
	if err := CheckTools(); err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat(DefaultStub); err != nil {
		t.Skip("systemd-boot-efi not installed")
	}
}

// The same inputs give the same signed bytes, on separate runs a second
// apart (sbsign's signing time is pinned), and the record names them.
func TestBuildReproducible(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	key, cert := testKey(t, dir)
	initrd := filepath.Join(dir, "initrd")
	if err := os.WriteFile(initrd, bytes.Repeat([]byte("cure initramfs "), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	// The stub stands in for the kernel: any PE image measures the same way.
	o := Options{Kernel: DefaultStub, Initrd: initrd, Cmdline: "console=ttyS0 panic=-1", OSRelease: "ID=cure\n",
		Key: key, Cert: cert, Epoch: 1700000000}
	var outs [][]byte
	var reps []string
	for i := 0; i < 2; i++ {
		o.Out = filepath.Join(dir, "cure"+string(rune('a'+i))+".efi")
		rep, err := Build(context.Background(), o, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(o.Out)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
		reps = append(reps, rep.SHA256+rep.AuthenticodeSHA256+rep.PCRs["4"]+rep.PCRs["11"])
		sum := sha256.Sum256(b)
		if rep.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("report sha256 %s, file %x", rep.SHA256, sum)
		}
		if i == 0 {
			time.Sleep(1100 * time.Millisecond)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two builds of the same inputs differ")
	}
	if reps[0] != reps[1] {
		t.Error("two builds' records differ")
	}
	// The signing time is Epoch, not the clock (UTCTime in the PKCS#7's
	// signed attributes): the build stays reproducible however long
	// hashing a large image takes.
	if st := time.Unix(o.Epoch, 0).UTC().Format("060102150405Z"); !bytes.Contains(outs[0], []byte(st)) {
		t.Errorf("signature has no signingTime %s", st)
	}
	// The Authenticode hash is the one sbsign signed: it appears in the
	// PKCS#7 SpcIndirectDataContent of the attribute certificate.
	b := outs[0]
	l, err := parsePE(b)
	if err != nil {
		t.Fatal(err)
	}
	if l.certSize == 0 {
		t.Fatal("signed image has no attribute certificate")
	}
	certOff := int(binary.LittleEndian.Uint32(b[l.certDirOff:]))
	ah, _ := AuthenticodeSHA256(b)
	if !bytes.Contains(b[certOff:certOff+l.certSize], ah) {
		t.Errorf("Authenticode hash %x not in the signature sbsign made", ah)
	}
	// Signing changes the file, not the image hash.
	for _, name := range []string{".linux", ".cmdline", ".osrel", ".initrd"} {
		if _, ok := l.section(b, name); !ok {
			t.Errorf("section %s missing", name)
		}
	}
	if got, _ := l.section(b, ".cmdline"); string(got) != o.Cmdline {
		t.Errorf(".cmdline = %q", got)
	}
}

// A changed input changes the prediction of the PCR it is measured into,
// and only those.
func TestPredictPCRs(t *testing.T) {
	needTools(t)
	dir := t.TempDir()
	key, cert := testKey(t, dir)
	initrd := filepath.Join(dir, "initrd")
	if err := os.WriteFile(initrd, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Kernel: DefaultStub, Initrd: initrd, Cmdline: "a", OSRelease: "ID=cure\n", Key: key, Cert: cert, Epoch: 1, Out: filepath.Join(dir, "a.efi")}
	a, err := Build(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(initrd, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Out = filepath.Join(dir, "b.efi")
	b, err := Build(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	// PCR 4 holds the UKI's Authenticode hash, which covers the initrd.
	for _, pcr := range []string{"4", "9", "11"} {
		if a.PCRs[pcr] == "" || a.PCRs[pcr] == b.PCRs[pcr] {
			t.Errorf("PCR %s: %q then %q: want a value that changes with the initrd", pcr, a.PCRs[pcr], b.PCRs[pcr])
		}
	}
	// PCR 9: the LoadOptions ("a" in UTF-16 with its NUL), then the initrd.
	want := extend(extend(make([]byte, 32), sha([]byte{'a', 0, 0, 0})), sha([]byte("two")))
	if b.PCRs["9"] != hex.EncodeToString(want) {
		t.Errorf("PCR 9 = %s, want %x", b.PCRs["9"], want)
	}
	// PCR 11 by hand: name then data of each section, in the stub's order.
	k, _ := os.ReadFile(DefaultStub)
	p := make([]byte, 32)
	for _, s := range []struct{ name, data string }{{".linux", string(k)}, {".osrel", "ID=cure\n"}, {".cmdline", "a"}, {".initrd", "two"}} {
		p = extend(p, sha([]byte(s.name+"\x00")))
		p = extend(p, sha([]byte(s.data)))
	}
	if b.PCRs["11"] != hex.EncodeToString(p) {
		t.Errorf("PCR 11 = %s, want %x", b.PCRs["11"], p)
	}
}

func TestBuildRefusesECKey(t *testing.T) {
	// Secure Boot verifies RSA signatures: an ECDSA certificate is refused
	// before anything is built.
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ec"}, NotBefore: time.Unix(0, 0), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ec.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCert(p); err == nil || !strings.Contains(err.Error(), "want RSA") || !strings.Contains(err.Error(), p) {
		t.Errorf("readCert(ECDSA) = %v, want an error naming the file and RSA", err)
	}
}
