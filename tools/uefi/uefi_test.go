package uefi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"
)

func certDER(t *testing.T) []byte {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Unix(0, 0), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// The signature list has the layout of UEFI 2.10 §32.4.1, byte for byte.
func TestSignatureList(t *testing.T) {
	a, b := certDER(t), certDER(t)[:0]
	b = append(b, certDER(t)...)
	owner := MustGUID("01234567-89ab-cdef-0123-456789abcdef")
	esl, err := SignatureList(owner, a, b)
	if err != nil {
		t.Fatal(err)
	}
	// EFI_CERT_X509_GUID a5c059a1-94e4-4aa7-87b5-ab155c2bf072, mixed-endian.
	if got := hex.EncodeToString(esl[:16]); got != "a159c0a5e494a74a87b5ab155c2bf072" {
		t.Errorf("SignatureType = %s", got)
	}
	if got := hex.EncodeToString(owner[:]); got != "67452301ab89efcd0123456789abcdef" {
		t.Errorf("owner GUID bytes = %s", got)
	}
	off := 0
	for i, der := range [][]byte{a, b} {
		l := esl[off:]
		size := int(binary.LittleEndian.Uint32(l[16:]))
		if size != 28+16+len(der) || binary.LittleEndian.Uint32(l[20:]) != 0 || int(binary.LittleEndian.Uint32(l[24:])) != 16+len(der) {
			t.Errorf("list %d: sizes %d %d %d", i, size, binary.LittleEndian.Uint32(l[20:]), binary.LittleEndian.Uint32(l[24:]))
		}
		if string(l[28:44]) != string(owner[:]) || string(l[44:size]) != string(der) {
			t.Errorf("list %d: owner or certificate wrong", i)
		}
		off += size
	}
	if off != len(esl) {
		t.Errorf("lists cover %d of %d bytes", off, len(esl))
	}
	if _, err := SignatureList(owner, []byte("not a cert")); err == nil {
		t.Error("garbage accepted as a certificate")
	}
}

// Variables written offline parse back, replace their older copy, and
// fill the store's free space no further than it has.
func TestVarStoreSetGet(t *testing.T) {
	const tmpl = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	b, err := os.ReadFile(tmpl)
	if err != nil {
		t.Skip("ovmf not installed")
	}
	vs, err := ParseVarStore(tmpl, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vs.Get("PK", GlobalVariable); !ok {
		t.Fatal("no PK in the snakeoil store")
	}
	for i, v := range [][]byte{{1, 0}, {2, 0}} {
		if err := vs.Set("BootNext", GlobalVariable, AttrNVBSRT, v); err != nil {
			t.Fatal(err)
		}
		again, err := ParseVarStore(tmpl, vs.Bytes())
		if err != nil {
			t.Fatalf("after set %d: %v", i, err)
		}
		got, ok := again.Get("BootNext", GlobalVariable)
		if !ok || string(got.Data) != string(v) || got.Attrs != AttrNVBSRT {
			t.Errorf("set %d: got %v %+v", i, ok, got)
		}
	}
	if err := vs.Set("db", ImageSecurityDatabase, 0x27, []byte{1}); err == nil {
		t.Error("an authenticated variable written offline without Append")
	}
	if err := vs.Set("Big", GlobalVariable, AttrNVBSRT, make([]byte, len(b))); err == nil {
		t.Error("a variable larger than the store accepted")
	}
	if _, err := ParseVarStore("x", make([]byte, 4096)); err == nil {
		t.Error("zeros parsed as a variable store")
	}
}

// The device path of an HTTP boot option, node by node.
func TestDevicePath(t *testing.T) {
	mac := []byte{0x52, 0x54, 0, 0xc0, 0xde, 1}
	p := DevicePath(nil).PciRoot(0).Pci(1, 0).MAC(mac).IPv4DHCP().URI("https://a/b").Bytes()
	want := "02010c00d041030a00000000" + "01010600" + "0001" + "03 0b 2500 525400c0de01" + strings.Repeat("00", 26) + "01" +
		"030c1b00" + strings.Repeat("00", 23) + "03180f00" + hex.EncodeToString([]byte("https://a/b")) + "7fff0400"
	clean := ""
	for _, r := range want {
		if r != ' ' {
			clean += string(r)
		}
	}
	if got := hex.EncodeToString(p); got != clean {
		t.Errorf("device path\n got %s\nwant %s", got, clean)
	}
	lo := LoadOption("X", DevicePath(nil).URI("u"))
	if binary.LittleEndian.Uint32(lo) != 1 || int(binary.LittleEndian.Uint16(lo[4:])) != 5+4 || string(lo[6:10]) != "X\x00\x00\x00" {
		t.Errorf("load option % x", lo)
	}
}
