package toolbundle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	builder "github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/tools/artifact"
	"github.com/cure-oss/cure/tools/toolbundle"
)

// iperf3Bundle packs the real iperf3 of the repository's spec (pinned
// Debian package, its libraries and loader) and returns the archive and
// its report.
func iperf3Bundle(t *testing.T) (string, *builder.Report) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian host: the bundle is built from Debian packages")
	}
	_, file, _, _ := runtime.Caller(0)
	s, err := builder.LoadSpec(filepath.Join(filepath.Dir(file), "../../initramfs/toolbundle.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range s.Tools {
		if tl.Name == "iperf3" {
			s.Tools = []builder.SpecTool{tl}
		}
	}
	dir := t.TempDir()
	r, err := builder.Build(s, builder.Host{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, builder.ArchiveName), r
}

// TestFetchVerifyRun: the runner's path. The bundle is fetched over HTTP
// with its size and sha256, unpacked into a fresh directory, and its
// iperf3 runs through the bundle's own loader and libraries. A wrong
// digest or size is refused before anything is unpacked, and the download
// is not left behind.
func TestFetchVerifyRun(t *testing.T) {
	archive, rep := iperf3Bundle(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, archive)
	}))
	defer srv.Close()
	ctx := context.Background()
	f := artifact.Fetcher{}
	ref := toolbundle.Ref{URL: srv.URL + "/artifacts/sha256/" + rep.SHA256, Want: artifact.Want{Size: rep.Size, SHA256: rep.SHA256}}

	t.Run("verified", func(t *testing.T) {
		tmp := t.TempDir()
		b, err := toolbundle.Fetch(ctx, f, ref, tmp, "tools", []string{"iperf3"})
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := b.Command(ctx, "iperf3", "--version")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(cmd.Path, filepath.Join(tmp, "tools")) {
			t.Errorf("command %s does not start the bundle's loader", cmd.Path)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "iperf 3.12") {
			t.Fatalf("bundle iperf3 --version: %v: %s", err, out)
		}
		left, _ := filepath.Glob(filepath.Join(tmp, ".toolbundle-*"))
		if len(left) != 0 {
			t.Errorf("download left behind: %v", left)
		}
		if _, err := b.Command(ctx, "fio"); err == nil {
			t.Error("a tool that was not unpacked got a command")
		}
	})
	for name, want := range map[string]artifact.Want{
		"wrong digest": {Size: rep.Size, SHA256: strings.Repeat("0", 64)},
		"wrong size":   {Size: rep.Size - 1, SHA256: rep.SHA256},
	} {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			_, err := toolbundle.Fetch(ctx, f, toolbundle.Ref{URL: ref.URL, Want: want}, tmp, "tools", []string{"iperf3"})
			if !errors.Is(err, artifact.ErrMismatch) {
				t.Fatalf("err %v, want an artifact mismatch", err)
			}
			if !strings.Contains(err.Error(), ref.URL) {
				t.Errorf("error %q does not name the URL", err)
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Errorf("after a refused fetch %s holds %v", tmp, entries)
			}
		})
	}
	t.Run("manifest", func(t *testing.T) {
		in, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		m, err := toolbundle.ReadManifest(in)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(m.Names(), ",") != "iperf3" || len(m.Files) != len(rep.Manifest.Files) {
			t.Errorf("manifest %+v", m)
		}
		if _, err := toolbundle.ReadManifest(strings.NewReader("not a bundle")); err == nil {
			t.Error("read a manifest from nothing")
		}
	})
	t.Run("tool not in the bundle", func(t *testing.T) {
		tmp := t.TempDir()
		_, err := toolbundle.Fetch(ctx, f, ref, tmp, "tools", []string{"fio"})
		if err == nil || !strings.Contains(err.Error(), "tool bundle has no fio (it has iperf3)") {
			t.Fatalf("err %v", err)
		}
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("after a failed unpack %s holds %v", tmp, entries)
		}
	})
}
