package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
)

// artifactsCmd is `provisioner-lite artifacts add`: files into the state
// dir's content-addressed artifact store, and with --sku the OS image's
// digest, size and format into a SKU manifest, so that the image a SKU
// names is the one the store holds. It works beside a running coordinator
// (the store is read on every use; a file lands under its digest with one
// rename), and the coordinator reads manifests on every use too.
func artifactsCmd(args []string, out io.Writer) int {
	if len(args) == 0 || args[0] != "add" {
		fmt.Fprintln(os.Stderr, "usage: provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml [--format F]] FILE...")
		return 2
	}
	fs := flag.NewFlagSet("artifacts add", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "state", "the coordinator's state dir (its artifact store is artifacts/ in it)")
	skuFile := fs.String("sku", "", "a SKU manifest whose spec.os.image becomes FILE (sha256, size, format); comments and layout are kept")
	format := fs.String("format", "", "with --sku: the image format (raw, raw.gz, raw.zst, raw.xz, qcow2; default: from FILE's name)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	files := fs.Args()
	switch {
	case len(files) == 0:
		fmt.Fprintln(os.Stderr, "artifacts add: no FILE given")
		return 2
	case *skuFile != "" && len(files) != 1:
		fmt.Fprintf(os.Stderr, "artifacts add: --sku takes one image, got %d files\n", len(files))
		return 2
	case *format != "" && *skuFile == "":
		fmt.Fprintln(os.Stderr, "artifacts add: --format goes with --sku")
		return 2
	}
	if st, err := os.Stat(*stateDir); err != nil || !st.IsDir() {
		fmt.Fprintf(os.Stderr, "artifacts add: --state-dir %s: not a state dir (make it with `provisioner-lite init --state-dir %s`)\n", *stateDir, *stateDir)
		return 1
	}
	// Read and check the SKU before anything is imported: a manifest that
	// cannot take the image is the operator's first thing to fix.
	var skuData []byte
	if *skuFile != "" {
		var err error
		if skuData, err = os.ReadFile(*skuFile); err != nil {
			fmt.Fprintln(os.Stderr, "artifacts add:", err)
			return 1
		}
		if _, err := manifests.ParseSKU(*skuFile, skuData); err != nil {
			fmt.Fprintf(os.Stderr, "artifacts add: --sku %s:\n%v\n", *skuFile, err)
			return 1
		}
		trial := manifests.Artifact{SHA256: strings.Repeat("0", 64), Size: 1, Format: manifests.ImageRaw}
		if _, err := manifests.SetOSImage(*skuFile, skuData, trial); err != nil {
			fmt.Fprintf(os.Stderr, "artifacts add: nothing imported: %v\n", err)
			return 1
		}
	}
	store := filepath.Join(*stateDir, "artifacts")
	var last manifests.Artifact
	for _, f := range files {
		sum, size, err := bootserver.ImportArtifact(store, f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "artifacts add:", err)
			return 1
		}
		fmt.Fprintf(out, "%s: sha256:%s, %d bytes, in %s\n", f, sum, size, store)
		last = manifests.Artifact{SHA256: sum, Size: size, Format: manifests.ImageFormatOf(f)}
	}
	if *skuFile == "" {
		return 0
	}
	if *format != "" {
		last.Format = *format
	}
	edited, err := manifests.SetOSImage(*skuFile, skuData, last)
	if err != nil {
		fmt.Fprintf(os.Stderr, "artifacts add: the image is in the store, but %s was not changed: %v\n", *skuFile, err)
		return 1
	}
	if err := writeFileLike(*skuFile, edited); err != nil {
		fmt.Fprintln(os.Stderr, "artifacts add:", err)
		return 1
	}
	fmt.Fprintf(out, "%s: spec.os.image is now sha256:%s, size %d, format %s\n", *skuFile, last.SHA256, last.Size, last.Format)
	return 0
}

// writeFileLike replaces path with data in one rename, keeping its mode.
func writeFileLike(path string, data []byte) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(st.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
