package builder

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	tbbuild "github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/tools/toolbundle"
	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

// TestImageOperatorTools checks the built default image (CURE_OUT, as
// TestImageBudget) without booting it: nvme-cli and the libraries only it
// needed are gone, the busybox has cure-tools, and /etc/cure/toolbundle.json
// pins the bundle make toolbundle built beside it. Then the image's own
// busybox, run on this host as cure-tools, fetches nvme from that bundle
// over HTTP, verifies it and runs it through the bundle's loader.
func TestImageOperatorTools(t *testing.T) {
	out := os.Getenv("CURE_OUT")
	if out == "" {
		t.Skip("CURE_OUT not set: run through `make test`, which builds the image first")
	}
	zst, err := os.ReadFile(filepath.Join(out, "image", ZstName))
	if err != nil {
		t.Fatalf("CURE_OUT is set but the default image is not built (make image): %v", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	archive, err := dec.DecodeAll(zst, nil)
	dec.Close()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	links := map[string]string{}
	err = cpio.ForEachRecord(cpio.Newc.Reader(bytes.NewReader(archive)), func(r cpio.Record) error {
		b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
		switch r.Mode & cpio.S_IFMT {
		case cpio.S_IFREG:
			files[r.Name] = b
		case cpio.S_IFLNK:
			links[r.Name] = string(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/sbin/nvme", "lib/x86_64-linux-gnu/libnvme.so.1", "lib/x86_64-linux-gnu/libnvme-mi.so.1",
		"lib/x86_64-linux-gnu/libsystemd.so.0", "lib/x86_64-linux-gnu/libgcrypt.so.20", "lib/x86_64-linux-gnu/libdbus-1.so.3"} {
		if _, ok := files[p]; ok {
			t.Errorf("the image still has /%s", p)
		}
	}
	if links["bbin/cure-tools"] != "bb" || files["bbin/bb"] == nil {
		t.Fatalf("bbin/cure-tools = %q, want a link to the busybox", links["bbin/cure-tools"])
	}

	raw := files["etc/cure/toolbundle.json"]
	pin, err := toolbundle.ParsePin("/etc/cure/toolbundle.json", raw)
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(out, "toolbundle", tbbuild.ArchiveName)
	size, sum, err := hashArchive(bundle)
	if err != nil {
		t.Fatalf("the tool bundle is not built beside the image (make toolbundle): %v", err)
	}
	if pin.SHA256 != sum || pin.Size != size {
		t.Fatalf("the image pins %s (%d bytes), %s is %s (%d bytes): make image after make toolbundle", pin.SHA256, pin.Size, bundle, sum, size)
	}
	var rep Report
	if b, err := os.ReadFile(filepath.Join(out, "image", ReportName)); err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report.json: %v", err)
	}
	want := &ToolBundleReport{Path: "/etc/cure/toolbundle.json", SHA256: sum, Size: size, Tools: pin.Names()}
	if !reflect.DeepEqual(rep.ToolBundle, want) {
		t.Errorf("report.json tool_bundle = %+v, want %+v", rep.ToolBundle, want)
	}
	if _, ok := pin.Tool("nvme"); !ok {
		t.Fatalf("the pinned bundle has no nvme: %v", pin.Names())
	}

	// The image's busybox, called by the name of its link.
	tmp := t.TempDir()
	bb := filepath.Join(tmp, "bb")
	pinFile := filepath.Join(tmp, "toolbundle.json")
	os.WriteFile(bb, files["bbin/bb"], 0o755)
	os.WriteFile(pinFile, raw, 0o644)
	if err := os.Symlink("bb", filepath.Join(tmp, "cure-tools")); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/artifacts/sha256/"+sum {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, bundle)
	}))
	defer srv.Close()
	dir := filepath.Join(tmp, "run")
	tools := func(args ...string) string {
		t.Helper()
		o, err := exec.Command(filepath.Join(tmp, "cure-tools"), append([]string{"-pin", pinFile, "-http", srv.URL, "-dir", dir}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("cure-tools %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return string(o)
	}
	if o := tools("list"); !strings.Contains(o, "nvme-cli") {
		t.Errorf("cure-tools list:\n%s", o)
	}
	t.Logf("cure-tools fetch nvme:\n%s", tools("fetch", "nvme"))
	if o := tools("run", "nvme", "version"); !strings.Contains(o, "nvme version") {
		t.Errorf("cure-tools run nvme version:\n%s", o)
	}
	if w, err := os.ReadFile(filepath.Join(dir, "bin", "nvme")); err != nil || !strings.HasPrefix(string(w), "#!/bbin/cure-tools run\n") {
		t.Errorf("wrapper: %v\n%s", err, w)
	}
}
