package nodes

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// writeCA writes a PEM file holding one fresh self-signed CA certificate.
func writeCA(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "site BMC CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

func writeFile(t *testing.T, path, body string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return path
}

const pinHex = "9F:86:D0:81:88:4C:7D:65:9A:2F:EA:A0:C5:5A:D0:15:A3:BF:4F:1B:2B:0B:82:2C:D1:5D:6C:15:B0:F0:0A:08"
const pinNorm = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestYAMLBMCTLSAndPasswordRefs(t *testing.T) {
	dir := t.TempDir()
	writeCA(t, filepath.Join(dir, "bmc-ca.pem"))
	pwFile := writeFile(t, filepath.Join(dir, "n3.pw"), "hunter2\n", 0o600)
	t.Setenv("CURE_TEST_BMC_PW", "from-env")
	inv := filepath.Join(dir, "inv.yaml")
	writeFile(t, inv, `nodes:
  - id: n1
    bmc: {url: "https://10.0.0.1", username: admin, password: literal, fingerprint: "`+pinHex+`"}
    macs: ["52:54:00:00:00:01"]
  - id: n2
    bmc: {url: "https://bmc2.example", username: admin, passwordEnv: CURE_TEST_BMC_PW, caFile: bmc-ca.pem}
    macs: ["52:54:00:00:00:02"]
  - id: n3
    bmc: {url: "http://10.0.0.3", username: admin, passwordFile: n3.pw, insecure: true}
    macs: ["52:54:00:00:00:03"]
`, 0o600)
	got, err := Load(inv)
	if err != nil {
		t.Fatal(err)
	}
	n1, n2, n3 := got[0], got[1], got[2]
	if n1.BMCFingerprint != pinNorm || n1.BMCPassword != "literal" || n1.BMCPasswordRef != "" || n1.BMCInsecure || n1.BMCCAFile != "" {
		t.Errorf("n1 (pinned, literal password) = %+v", n1)
	}
	if n2.BMCCAFile != filepath.Join(dir, "bmc-ca.pem") || n2.BMCPassword != "" || n2.BMCPasswordRef != "env:CURE_TEST_BMC_PW" || n2.BMCFingerprint != "" {
		t.Errorf("n2 (CA file relative to the inventory, env password) = %+v", n2)
	}
	if !n3.BMCInsecure || n3.BMCPassword != "" || n3.BMCPasswordRef != "file:"+pwFile {
		t.Errorf("n3 (insecure http, password file) = %+v", n3)
	}
	// The references resolve to the passwords, read now.
	for _, c := range []struct {
		n    store.Node
		want string
	}{{n1, "literal"}, {n2, "from-env"}, {n3, "hunter2"}} {
		if pw, err := ResolvePassword(c.n); err != nil || pw != c.want {
			t.Errorf("ResolvePassword(%s) = %q, %v; want %q", c.n.ID, pw, err, c.want)
		}
	}
	// What the store is given holds no password for n2 and n3.
	for _, n := range got[1:] {
		if n.BMCPassword != "" {
			t.Errorf("node %s carries a literal password %q", n.ID, n.BMCPassword)
		}
	}
}

func TestYAMLBMCFileErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "empty.pem"), "# no certificates here\n", 0o644)
	writeFile(t, filepath.Join(dir, "key.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})), 0o644)
	writeCA(t, filepath.Join(dir, "ca.pem"))
	writeFile(t, filepath.Join(dir, "shared.pw"), "pw\n", 0o640)
	writeFile(t, filepath.Join(dir, "blank.pw"), "\n", 0o600)
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := func(bmc string) string {
		return "nodes:\n  - id: a\n    bmc: {url: https://h, username: u, " + bmc + "}\n    macs: [52:54:00:00:00:01]\n"
	}
	for _, tc := range []struct {
		name, bmc string
		want      []string
	}{
		{"CA file without certificates", "password: p, caFile: empty.pem", []string{":3:61: nodes[0].bmc.caFile: " + filepath.Join(dir, "empty.pem") + " holds no PEM certificate"}},
		{"CA file with a key", "password: p, caFile: key.pem", []string{"nodes[0].bmc.caFile:", "PEM block 1 is a PRIVATE KEY, not a CERTIFICATE"}},
		{"CA file is a FIFO", "password: p, caFile: fifo", []string{"nodes[0].bmc.caFile:", "is not a regular file"}},
		{"CA file and fingerprint", "password: p, caFile: ca.pem, fingerprint: " + strings.Repeat("00", 32), []string{"nodes[0].bmc.fingerprint: with caFile: give one way"}},
		{"CA file and insecure", "password: p, caFile: ca.pem, insecure: true", []string{"nodes[0].bmc.caFile: contradicts insecure: true"}},
		{"password file readable by group", "passwordFile: shared.pw", []string{"nodes[0].bmc.passwordFile: passwordFile " + filepath.Join(dir, "shared.pw") + " is readable by group or others (mode 0640): chmod 600 it"}},
		{"empty password file", "passwordFile: blank.pw", []string{"nodes[0].bmc.passwordFile:", "is empty"}},
		{"missing password file", "passwordFile: nope.pw", []string{"nodes[0].bmc.passwordFile:", "no such file"}},
		{"three password sources", "password: p, passwordEnv: X, passwordFile: x", []string{"nodes[0].bmc: both password and passwordEnv and passwordFile set"}},
		{"bad env name", "passwordEnv: \"A-B\"", []string{"nodes[0].bmc.passwordEnv: passwordEnv \"A-B\": not an environment variable name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Join(dir, "inv.yaml")
			_, err := ParseYAML(name, []byte(node(tc.bmc)))
			if err == nil {
				t.Fatal("ParseYAML succeeded, want an error")
			}
			if !strings.HasPrefix(err.Error(), name+":3:") {
				t.Errorf("error %q does not start with the file and line", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestCSVBMCColumns(t *testing.T) {
	dir := t.TempDir()
	writeCA(t, filepath.Join(dir, "ca.pem"))
	pw := writeFile(t, filepath.Join(dir, "pw"), "s3cret\r\n", 0o600)
	name := filepath.Join(dir, "inv.csv")
	doc := "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,bmc_ca_file,bmc_fingerprint,bmc_insecure,bmc_password_file\n" +
		"a,https://10.0.0.1,u,,52:54:00:00:00:01,s,,,ca.pem,,,pw\n" +
		"b,https://10.0.0.2,u,p,52:54:00:00:00:02,s,,,," + strings.ReplaceAll(pinHex, ":", "") + ",false,\n" +
		"c,http://10.0.0.3,u,p,52:54:00:00:00:03,s,,,,,TRUE,\n"
	got, err := ParseCSV(name, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].BMCCAFile != filepath.Join(dir, "ca.pem") || got[0].BMCPasswordRef != "file:"+pw || got[0].BMCPassword != "" {
		t.Errorf("a = %+v", got[0])
	}
	if got[1].BMCFingerprint != pinNorm || got[1].BMCInsecure || got[1].BMCPassword != "p" {
		t.Errorf("b = %+v", got[1])
	}
	if !got[2].BMCInsecure {
		t.Errorf("c = %+v", got[2])
	}
	if p, err := ResolvePassword(got[0]); err != nil || p != "s3cret" {
		t.Errorf("password file with CRLF: %q %v", p, err)
	}

	bad := "id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,bmc_fingerprint,bmc_insecure\n" +
		"a,http://h,u,p,52:54:00:00:00:01,s,,,,\n" +
		"b,https://h,u,p,52:54:00:00:00:02,s,,,zz,maybe\n" +
		"c,https://h,u,p,52:54:00:00:00:03,s,,," + pinNorm + ",1\n"
	_, err = ParseCSV("f.csv", []byte(bad))
	for _, w := range []string{
		`f.csv:2:3: bmc_url: "http://h": plain http://`,
		`f.csv:3:39: bmc_fingerprint: fingerprint "zz"`,
		`f.csv:3:42: bmc_insecure: "maybe": want true or false`,
		`f.csv:4:39: bmc_fingerprint: contradicts insecure: true`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v\ndoes not contain %q", err, w)
		}
	}
}

func TestResolvePassword(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CURE_TEST_PW", "env-pw")
	t.Setenv("CURE_TEST_EMPTY", "")
	ok := writeFile(t, filepath.Join(dir, "ok"), "two\nlines\n\n", 0o400)
	for _, tc := range []struct {
		n    store.Node
		want string // the password, or a substring of the error
		err  bool
	}{
		{store.Node{ID: "lit", BMCPassword: "x"}, "x", false},
		{store.Node{ID: "env", BMCPasswordRef: "env:CURE_TEST_PW"}, "env-pw", false},
		// Only one trailing newline goes: the rest is the password.
		{store.Node{ID: "file", BMCPasswordRef: "file:" + ok}, "two\nlines\n", false},
		{store.Node{ID: "both", BMCPassword: "x", BMCPasswordRef: "env:CURE_TEST_PW"}, "node both: both a literal BMC password and a reference", true},
		{store.Node{ID: "none"}, "node none: no BMC password", true},
		{store.Node{ID: "unset", BMCPasswordRef: "env:CURE_TEST_UNSET_VAR"}, "node unset: BMC password: environment variable CURE_TEST_UNSET_VAR (passwordEnv) is unset or empty", true},
		{store.Node{ID: "empty", BMCPasswordRef: "env:CURE_TEST_EMPTY"}, "is unset or empty", true},
		{store.Node{ID: "rel", BMCPasswordRef: "file:pw"}, `passwordFile "pw": not an absolute path`, true},
		{store.Node{ID: "world", BMCPasswordRef: "file:" + writeFile(t, filepath.Join(dir, "world"), "pw", 0o604)}, "readable by group or others (mode 0604)", true},
		{store.Node{ID: "big", BMCPasswordRef: "file:" + writeFile(t, filepath.Join(dir, "big"), strings.Repeat("x", 5000), 0o600)}, "larger than 4096 bytes", true},
		{store.Node{ID: "dir", BMCPasswordRef: "file:" + dir}, "not a regular file", true},
		{store.Node{ID: "scheme", BMCPasswordRef: "vault:x"}, `password reference "vault:x": want env:NAME or file:/path`, true},
	} {
		got, err := ResolvePassword(tc.n)
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: ResolvePassword = %q, %v; want an error containing %q", tc.n.ID, got, err, tc.want)
		case !tc.err && (err != nil || got != tc.want):
			t.Errorf("%s: ResolvePassword = %q, %v; want %q", tc.n.ID, got, err, tc.want)
		}
	}
}

func TestLoadCABundle(t *testing.T) {
	dir := t.TempDir()
	ca := writeCA(t, filepath.Join(dir, "a.pem"))
	b, _ := os.ReadFile(filepath.Join(dir, "a.pem"))
	writeCA(t, filepath.Join(dir, "b.pem"))
	b2, _ := os.ReadFile(filepath.Join(dir, "b.pem"))
	// Text around the blocks (as in distribution bundles) is fine.
	writeFile(t, filepath.Join(dir, "bundle.pem"), "# site CAs\n"+string(b)+"\n# second\n"+string(b2), 0o644)
	pool, err := LoadCABundle(filepath.Join(dir, "bundle.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Fatalf("the bundle's CA does not verify against the pool: %v", err)
	}
	writeFile(t, filepath.Join(dir, "cut.pem"), string(b)+string(b2[:len(b2)/2]), 0o644)
	if _, err := LoadCABundle(filepath.Join(dir, "cut.pem")); err == nil || !strings.Contains(err.Error(), "does not decode (truncated?)") {
		t.Fatalf("truncated bundle: %v", err)
	}
}
