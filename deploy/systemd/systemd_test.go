package systemd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitsVerify runs systemd-analyze verify on the units as
// shipped, their ExecStart pointed at an executable in a scratch dir (verify
// refuses a command that is not there). verify only warns on an unknown
// key or a bad value, so any line it prints about our units fails the test
// too; the broken cases prove both ways of failing are caught.
func TestSystemdUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze not found: scripts/install-deps.sh installs systemd for the tests")
	}
	cases := []struct {
		name     string
		service  string
		wantFail string // "" for the units as shipped
	}{
		{"shipped", string(Service), ""},
		{"unknown key", string(Service) + "ListenSocket=8080\n", "Unknown key"},
		{"bad value", strings.Replace(string(Service), "Type=simple", "Type=notfy", 1), "service type"},
		{"missing binary", strings.Replace(string(Service), "ExecStart="+ExecPath, "ExecStart=/nonexistent/provisioner-lite", 1), "not executable"},
		{"bad address family", strings.Replace(string(Service), "AF_NETLINK", "AF_NETLNK", 1), "address famil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := verify(t, c.service)
			switch {
			case c.wantFail == "" && (err != nil || out != ""):
				t.Fatalf("systemd-analyze verify refused the shipped units (%v):\n%s", err, out)
			case c.wantFail != "" && err == nil && out == "":
				t.Fatalf("systemd-analyze verify accepted a broken unit (want %q)", c.wantFail)
			case c.wantFail != "" && !strings.Contains(out, c.wantFail):
				t.Fatalf("verify's complaint %q lacks %q", out, c.wantFail)
			}
		})
	}
}

// verify writes the service (its ExecStart rewritten to a scratch copy of
// true(1)) and the socket to a temp dir and returns what verify said of
// them, and its error.
func verify(t *testing.T, service string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "provisioner-lite")
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(truePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	service = strings.Replace(service, "ExecStart="+ExecPath+" ", "ExecStart="+bin+" ", 1)
	for name, body := range map[string][]byte{"provisioner-lite.service": []byte(service), "provisioner-lite.socket": Socket} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("systemd-analyze", "verify", "--man=no", "--recursive-errors=no",
		filepath.Join(dir, "provisioner-lite.socket"), filepath.Join(dir, "provisioner-lite.service"))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err = cmd.Run()
	// Keep only what names our units: verify may also complain of the
	// machine's own units.
	var ours []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "provisioner-lite") {
			ours = append(ours, l)
		}
	}
	return strings.Join(ours, "\n"), err
}

func TestSysusersAndConfig(t *testing.T) {
	if !bytes.Contains(Sysusers, []byte(`u cure - "CURE coordinator" /var/lib/cure`)) {
		t.Errorf("cure.sysusers lacks the cure user line:\n%s", Sysusers)
	}
	for _, key := range []string{"state-dir: /var/lib/cure\n", "manifests: /etc/cure/manifests\n", "image-dir: /var/lib/cure/image\n"} {
		if !bytes.Contains(Config, []byte(key)) {
			t.Errorf("provisioner-lite.yaml lacks %q", key)
		}
	}
	for _, want := range []string{"--config /etc/cure/provisioner-lite.yaml", "--http-listen fd:3", "--grpc-listen fd:4", "--https-listen fd:5", "StateDirectory=cure", "User=cure"} {
		if !bytes.Contains(Service, []byte(want)) {
			t.Errorf("provisioner-lite.service lacks %q", want)
		}
	}
}
