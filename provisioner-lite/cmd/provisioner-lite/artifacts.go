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
	"github.com/cure-oss/cure/tools/chunklist"
)

// artifactsCmd is `provisioner-lite artifacts add`: files into the state
// dir's content-addressed artifact store, and with --sku the OS image's
// digest, size and format into a SKU manifest, so that the image a SKU
// names is the one the store holds. It works beside a running coordinator
// (the store is read on every use; a file lands under its digest with one
// rename), and the coordinator reads manifests on every use too.
func artifactsCmd(args []string, out io.Writer) int {
	if len(args) == 0 || args[0] != "add" {
		fmt.Fprintln(os.Stderr, "usage: provisioner-lite artifacts add --state-dir DIR [--sku SKU.yaml [--format F] [--chunks blake3|sha256|none]] FILE...")
		return 2
	}
	fs := flag.NewFlagSet("artifacts add", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "state", "the coordinator's state dir (its artifact store is artifacts/ in it)")
	skuFile := fs.String("sku", "", "a SKU manifest whose spec.os.image becomes FILE (sha256, size, format); comments and layout are kept")
	format := fs.String("format", "", "with --sku: the image format (raw, raw.gz, raw.zst, raw.xz, qcow2; default: from FILE's name)")
	chunkAlg := fs.String("chunks", chunklist.DefaultAlg.String(), "with --sku: the digest of the image's chunk list (blake3 or sha256), which lets nodes verify the image on all cores as it arrives; none: no list, the image's sha256 is checked when its download ends")
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
	var alg chunklist.Alg
	if *chunkAlg != "none" {
		var err error
		if alg, err = chunklist.ParseAlg(*chunkAlg); err != nil {
			fmt.Fprintf(os.Stderr, "artifacts add: --chunks: %v (or none)\n", err)
			return 2
		}
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
	if alg != 0 {
		sum, n, err := addChunkList(store, bootserver.ArtifactPath(store, last.SHA256), alg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "artifacts add:", err)
			return 1
		}
		last.Chunks = sum
		fmt.Fprintf(out, "%s: chunk list sha256:%s (%s, %d chunks of %d bytes), in %s\n", files[0], sum, alg, n, chunklist.DefaultChunk, store)
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
	fmt.Fprintf(out, "%s: spec.os.image is now sha256:%s, size %d, format %s", *skuFile, last.SHA256, last.Size, last.Format)
	if last.Chunks != "" {
		fmt.Fprintf(out, ", chunks %s", last.Chunks)
	}
	fmt.Fprintln(out)
	return 0
}

// addChunkList computes the chunk list of the stored image at path and
// imports it into the store beside it (an artifact of its own, named by
// its sha256, which the SKU pins).
func addChunkList(store, path string, alg chunklist.Alg) (string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("chunk list: %w", err)
	}
	defer f.Close()
	l, err := chunklist.Build(f, alg, chunklist.DefaultChunk)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", path, err)
	}
	tmp, err := os.CreateTemp(store, ".chunks-*")
	if err != nil {
		return "", 0, fmt.Errorf("chunk list: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(l.Marshal()); err != nil {
		tmp.Close()
		return "", 0, fmt.Errorf("chunk list: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, fmt.Errorf("chunk list: %w", err)
	}
	sum, _, err := bootserver.ImportArtifact(store, tmp.Name())
	if err != nil {
		return "", 0, err
	}
	return sum, len(l.Digests), nil
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
