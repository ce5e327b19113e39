package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
)

// secretVolume lays files out as the kubelet mounts a Secret: the data in
// a hidden timestamped dir, ..data linking to it, each key a link through
// ..data.
func secretVolume(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_11_29_01_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(data, k), v, 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fleetSecret is what `provisioner-lite init` made on one host, as the
// Secret every instance mounts.
func fleetSecret(t *testing.T) map[string][]byte {
	t.Helper()
	src := t.TempDir()
	pkiDir := filepath.Join(src, "pki")
	if _, err := pki.EnsureCA(pkiDir); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{statedir.KeyFile: bytes.Repeat([]byte{7}, 32)}
	for _, k := range []string{pki.CACertFile, pki.CAKeyFile} {
		b, err := os.ReadFile(filepath.Join(pkiDir, k))
		if err != nil {
			t.Fatal(err)
		}
		files[k] = b
	}
	return files
}

// TestSeedStateDir: the seeded dir is one statedir.Open takes (0700, the
// key loaded, the CA the Secret's), a second seed is a no-op, and a Secret
// that would make instances disagree is refused naming the file.
func TestSeedStateDir(t *testing.T) {
	secret := fleetSecret(t)
	from := secretVolume(t, secret)
	state := filepath.Join(t.TempDir(), "state")
	var out bytes.Buffer
	if rc := runSeed([]string{"--from", from, "--state-dir", state}, &out); rc != 0 {
		t.Fatalf("seed: rc %d", rc)
	}
	if !strings.Contains(out.String(), "3 files") {
		t.Errorf("seed said %q", out.String())
	}
	for _, p := range []string{"", "pki"} {
		if st, err := os.Stat(filepath.Join(state, p)); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s/%s: %v %v, want 0700", state, p, st.Mode(), err)
		}
	}
	if st, err := os.Lstat(filepath.Join(state, statedir.KeyFile)); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf("state.key: %v %v, want a regular file 0600", st.Mode(), err)
	}
	sd, err := statedir.Open(state, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sd.Key, secret[statedir.KeyFile]) {
		t.Error("statedir.Open loaded another key than the Secret's")
	}
	sd.Close()
	ca, err := pki.EnsureCA(filepath.Join(state, "pki"))
	if err != nil || !bytes.Equal(ca, secret[pki.CACertFile]) {
		t.Errorf("the state dir's CA is not the Secret's (%v)", err)
	}
	// A container restart keeps the emptyDir: seeding again is fine.
	if rc := runSeed([]string{"-from", from, "-state-dir", state}, io.Discard); rc != 0 {
		t.Errorf("second seed: rc %d", rc)
	}
	other := map[string][]byte{}
	for k, v := range secret {
		other[k] = v
	}
	other[statedir.KeyFile] = bytes.Repeat([]byte{8}, 32)
	if _, err := seedStateDir(secretVolume(t, other), state, false); err == nil || !strings.Contains(err.Error(), "state.key") || !strings.Contains(err.Error(), "different") {
		t.Errorf("another key over the seeded one: %v", err)
	}
}

func TestSeedRefusals(t *testing.T) {
	secret := fleetSecret(t)
	with := func(change func(map[string][]byte)) string {
		m := map[string][]byte{}
		for k, v := range secret {
			m[k] = v
		}
		change(m)
		return secretVolume(t, m)
	}
	cases := []struct {
		name, from string
		httpsBoot  bool
		want       string
	}{
		{"no key", with(func(m map[string][]byte) { delete(m, statedir.KeyFile) }), false, "no state.key"},
		{"short key", with(func(m map[string][]byte) { m[statedir.KeyFile] = []byte("abc\n") }), false, "4 bytes, want 32"},
		{"no CA key", with(func(m map[string][]byte) { delete(m, pki.CAKeyFile) }), false, "ca-key.pem"},
		{"unknown key", with(func(m map[string][]byte) { m["state-key"] = nil }), false, `unknown key "state-key"`},
		{"boot CA without key", with(func(m map[string][]byte) { m[pki.BootCACertFile] = []byte("x") }), false, "boot-ca.pem without"},
		{"https boot without boot CA", with(func(map[string][]byte) {}), true, "--https-boot"},
	}
	for _, c := range cases {
		state := filepath.Join(t.TempDir(), "state")
		_, err := seedStateDir(c.from, state, c.httpsBoot)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.from) {
			t.Errorf("%s: %v, want an error naming %s and %q", c.name, err, c.from, c.want)
		}
		if _, err := os.Stat(state); err == nil {
			t.Errorf("%s: the state dir was made anyway", c.name)
		}
	}
	if rc := runSeed([]string{"--from", "x"}, io.Discard); rc != 2 {
		t.Errorf("no --state-dir: rc %d, want 2", rc)
	}
}
