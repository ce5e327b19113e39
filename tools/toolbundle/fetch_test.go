package toolbundle_test

import (
	"bytes"
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
// Debian package, its libraries and loader) with the spec's helper
// (cure-measure, built from this tree) and returns the archive and its
// report.
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
	r, err := builder.Build(s, builder.Host{TmpDir: t.TempDir()}, dir)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, builder.ArchiveName), r
}

// TestFetchVerifyRun: the node's path. The bundle is fetched over HTTP
// with its size and sha256 (Fetch, the runner), a program is taken out of
// it (ExtractProgram, how the runner gets cure-measure), and its iperf3 is
// unpacked and run through the bundle's own loader and libraries (Unpack,
// cure-measure). A wrong digest or size is refused and nothing is left.
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
		got, err := toolbundle.Fetch(ctx, f, ref, tmp)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(tmp, "extracted")
		if err := toolbundle.ExtractProgram(got, "iperf3", dst); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile("/usr/bin/iperf3")
		if b, err := os.ReadFile(dst); err != nil || !bytes.Equal(b, want) {
			t.Errorf("extracted iperf3 differs from the packed one (%v)", err)
		}
		if err := toolbundle.ExtractProgram(got, "fio", filepath.Join(tmp, "fio")); err == nil || !strings.Contains(err.Error(), "no bin/fio in the archive") {
			t.Errorf("extracting what is not there: %v", err)
		}
		in, err := os.Open(got)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		dir := filepath.Join(tmp, "tools")
		os.Mkdir(dir, 0o755)
		b, err := toolbundle.Unpack(in, dir, toolbundle.Options{Tools: []string{"iperf3"}})
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := b.Command(ctx, "iperf3", "--version")
		if err != nil {
			t.Fatal(err)
		}
		if cmd.Path != filepath.Join(tmp, "tools", "lib", "ld-linux-x86-64.so.2") {
			t.Errorf("command %s does not start the bundle's loader", cmd.Path)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "iperf 3.12") {
			t.Fatalf("bundle iperf3 --version: %v: %s", err, out)
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
			_, err := toolbundle.Fetch(ctx, f, toolbundle.Ref{URL: ref.URL, Want: want}, tmp)
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
		if strings.Join(m.Names(), ",") != "cure-measure,iperf3" || len(m.Files) != len(rep.Manifest.Files) {
			t.Errorf("manifest %+v", m)
		}
		if _, err := toolbundle.ReadManifest(strings.NewReader("not a bundle")); err == nil {
			t.Error("read a manifest from nothing")
		}
	})
	t.Run("tool not in the bundle", func(t *testing.T) {
		in, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		dir := t.TempDir()
		_, err = toolbundle.Unpack(in, dir, toolbundle.Options{Tools: []string{"fio"}})
		if err == nil || !strings.Contains(err.Error(), "tool bundle has no fio (it has cure-measure, iperf3)") {
			t.Fatalf("err %v", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("after a failed unpack %s holds %v", dir, entries)
		}
	})
}
