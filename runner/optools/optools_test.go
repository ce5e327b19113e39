package optools_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	tbbuild "github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/runner/optools"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// nvmeBundle builds, with the builder, a bundle of the repository spec's
// nvme (the pinned Debian nvme-cli, its libraries and loader) and returns
// the archive and its pin.
func nvmeBundle(t *testing.T) (string, *toolbundle.Pin) {
	t.Helper()
	return bundleOf(t, "nvme")
}

// bundleOf builds a bundle of the repository spec's tool name.
func bundleOf(t *testing.T, name string) (string, *toolbundle.Pin) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian host: the bundle is built from Debian packages")
	}
	_, file, _, _ := runtime.Caller(0)
	s, err := tbbuild.LoadSpec(filepath.Join(filepath.Dir(file), "../../initramfs/toolbundle.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []tbbuild.SpecTool
	for _, tl := range s.Tools {
		if tl.Name == name {
			keep = append(keep, tl)
		}
	}
	if len(keep) != 1 {
		t.Fatalf("%s has no %s tool", s.File, name)
	}
	s.Tools, s.Programs = keep, nil
	dir := t.TempDir()
	r, err := tbbuild.Build(s, tbbuild.Host{TmpDir: t.TempDir()}, dir)
	if err != nil {
		t.Fatal(err)
	}
	pin, err := toolbundle.NewPin(r.SHA256, r.Size, r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, tbbuild.ArchiveName), pin
}

func serve(t *testing.T, body []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/artifacts/sha256/") {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFetchVerifiesAndUnpacksNVMe: cure-tools fetch nvme against an HTTP
// server serving a real bundle: the bundle's nvme-cli is unpacked with its
// libraries and runs through the bundle's loader; its wrapper names the
// command; the archive is gone afterwards; a second fetch replaces the
// first.
func TestFetchVerifiesAndUnpacksNVMe(t *testing.T) {
	archive, pin := nvmeBundle(t)
	body, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		w.Write(body)
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "cure-tools")
	c := optools.Config{Pin: pin, PinFile: "/etc/cure/toolbundle.json", BaseURL: srv.URL + "/", Dir: dir, Self: "/bbin/cure-tools"}
	plan, err := c.MakePlan([]string{"nvme", "nvme"})
	if err != nil {
		t.Fatal(err)
	}
	if want := srv.URL + "/artifacts/sha256/" + pin.SHA256; plan.URL != want || len(plan.Tools) != 1 {
		t.Fatalf("plan = %+v, want one tool from %s", plan, want)
	}
	for round := 0; round < 2; round++ {
		got, err := c.Fetch(context.Background(), plan)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Dir != filepath.Join(dir, "nvme") || got[0].Wrapper != filepath.Join(dir, "bin", "nvme") {
			t.Fatalf("installed %+v", got)
		}
	}
	if len(paths) != 2 || paths[0] != "/artifacts/sha256/"+pin.SHA256 {
		t.Errorf("requests %v", paths)
	}
	want, _ := os.ReadFile("/usr/sbin/nvme")
	if b, err := os.ReadFile(filepath.Join(dir, "nvme", "bin", "nvme")); err != nil || !bytes.Equal(b, want) {
		t.Errorf("unpacked nvme differs from /usr/sbin/nvme (%v)", err)
	}
	for _, lib := range []string{"libnvme.so.1", "libjson-c.so.5", "ld-linux-x86-64.so.2"} {
		if _, err := os.Stat(filepath.Join(dir, "nvme", "lib", lib)); err != nil {
			t.Errorf("%s not unpacked: %v", lib, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "bin nvme" {
		t.Errorf("%s holds %v, want only bin and nvme (no archive, no temporary directory)", dir, names)
	}

	argv, err := optools.Command(dir, pin, filepath.Join(dir, "bin", "nvme"), []string{"version"})
	if err != nil {
		t.Fatal(err)
	}
	if argv[0] != filepath.Join(dir, "nvme", "lib", "ld-linux-x86-64.so.2") || argv[1] != "--library-path" {
		t.Errorf("argv = %q, want the bundle's loader first", argv)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nvme version") {
		t.Errorf("%q: %v: %s", argv, err, out)
	}
	wrapper, err := os.ReadFile(filepath.Join(dir, "bin", "nvme"))
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(wrapper), "\n"); first != "#!/bbin/cure-tools run" || !strings.Contains(string(wrapper), strings.Join(argv[:4], " ")) {
		t.Errorf("wrapper:\n%s", wrapper)
	}
	if st, _ := os.Stat(filepath.Join(dir, "bin", "nvme")); st == nil || st.Mode().Perm()&0o111 == 0 {
		t.Errorf("wrapper is not executable: %v", st)
	}
	var l strings.Builder
	c.List(&l)
	if !strings.Contains(l.String(), "nvme-cli "+pin.Tools[0].Version) || !strings.Contains(l.String(), "fetched: "+filepath.Join(dir, "bin", "nvme")) {
		t.Errorf("list:\n%s", l.String())
	}
}

// TestFetchRefuses: a tampered bundle (one byte changed), a coordinator
// that does not serve the pinned bundle, one that cannot be reached, and
// no cure.http= are each an error a person can act on, and leave nothing
// unpacked.
func TestFetchRefuses(t *testing.T) {
	archive, pin := nvmeBundle(t)
	body, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(body)
	tampered[len(tampered)/2] ^= 0x40
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()

	for _, tc := range []struct {
		name, base string
		want       []string
	}{
		{"tampered", serve(t, tampered).URL, []string{"refused, not the tool bundle this image pins", "expected " + pin.SHA256 + ", got "}},
		{"truncated", serve(t, body[:len(body)-1]).URL, []string{"refused", "size: expected"}},
		{"not served", serve(t, nil).URL + "/sub", []string{"does not serve the tool bundle this image pins", pin.SHA256, "HTTP 404", "--tool-bundle"}},
		{"unreachable", down.URL, []string{"cannot reach the coordinator's artifact server " + down.URL, "ip addr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := optools.Config{Pin: pin, PinFile: "/etc/cure/toolbundle.json", BaseURL: tc.base, Dir: dir, Self: "/bbin/cure-tools"}
			plan, err := c.MakePlan([]string{"nvme"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Fetch(context.Background(), plan)
			t.Logf("%s: %v", tc.name, err)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to contain %q", err, w)
				}
			}
			if len(got) != 0 {
				t.Errorf("installed %+v", got)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir)); len(ents) != 1 || ents[0].Name() != "bin" {
				t.Errorf("left behind: %v", ents)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "bin")); len(ents) != 0 {
				t.Errorf("wrappers written: %v", ents)
			}
			if _, err := optools.Command(dir, pin, "nvme", nil); err == nil || !strings.Contains(err.Error(), "cure-tools fetch nvme") {
				t.Errorf("Command of an unfetched tool: %v", err)
			}
		})
	}

	c := optools.Config{Pin: pin, PinFile: "/etc/cure/toolbundle.json", Dir: t.TempDir()}
	if _, err := c.MakePlan([]string{"nvme"}); err == nil || !strings.Contains(err.Error(), "no cure.http=") {
		t.Errorf("no cure.http: %v", err)
	}
	c.BaseURL = "10.0.0.1:8080"
	if _, err := c.MakePlan([]string{"nvme"}); err == nil || !strings.Contains(err.Error(), "not an http://HOST:PORT URL") {
		t.Errorf("bad cure.http: %v", err)
	}
	if _, err := c.MakePlan([]string{"smartctl"}); err == nil || !strings.Contains(err.Error(), `has no "smartctl" (it has nvme)`) {
		t.Errorf("unknown tool: %v", err)
	}
}
