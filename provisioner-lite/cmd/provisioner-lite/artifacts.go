package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/tools/chunklist"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// artifactsCmd is `provisioner-lite artifacts args...` printing to out,
// its exit code.
func artifactsCmd(args []string, out io.Writer) int {
	return execute(append([]string{"artifacts"}, args...), out, os.Stderr)
}

// addOpts are artifacts add's flags.
type addOpts struct {
	stateDir, skuFile, format, chunkAlg, output, logFormat string
}

// artifactsCmd is `provisioner-lite artifacts add`: files into the state
// dir's content-addressed artifact store, and with --sku the OS image's
// digest, size and format into a SKU manifest, so that the image a SKU
// names is the one the store holds. It works beside a running coordinator
// (the store is read on every use; a file lands under its digest with one
// rename), and the coordinator reads manifests on every use too.
func (a *app) artifactsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifacts",
		Short: "The state dir's artifact store: artifacts add",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return fmt.Errorf("artifacts: want a command: add") },
	}
	var o addOpts
	add := &cobra.Command{
		Use:   "add --state-dir DIR [--sku SKU.yaml [--format F] [--chunks blake3|sha256|none]] [-o json|yaml] FILE...",
		Short: "Copy files into the artifact store; with --sku, FILE becomes that SKU's OS image",
		Long: `Copy each FILE into the state dir's content-addressed artifact store (beside a
running coordinator too: a file lands under its digest with one rename). With
--sku, FILE becomes that SKU manifest's spec.os.image (sha256, size, format,
chunk list); the manifest keeps its comments and layout. On a terminal, a
progress bar on stderr follows each copy.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, files []string) error { return a.artifactsAdd(o, files) },
	}
	f := add.Flags()
	f.StringVar(&o.stateDir, "state-dir", "state", "the coordinator's state dir (its artifact store is artifacts/ in it)")
	f.StringVar(&o.skuFile, "sku", "", "a SKU manifest whose spec.os.image becomes FILE (sha256, size, format); comments and layout are kept")
	f.StringVar(&o.format, "format", "", "with --sku: the image format (raw, raw.gz, raw.zst, raw.xz, qcow2; default: from FILE's name)")
	f.StringVar(&o.chunkAlg, "chunks", chunklist.DefaultAlg.String(), "with --sku: the digest of the image's chunk list (blake3 or sha256), which lets nodes verify the image on all cores as it arrives; none: no list, the image's sha256 is checked when its download ends")
	add.MarkFlagDirname("state-dir")
	add.MarkFlagFilename("sku", "yaml", "yml")
	add.RegisterFlagCompletionFunc("chunks", cobra.FixedCompletions([]string{"blake3", "sha256", "none"}, cobra.ShellCompDirectiveNoFileComp))
	outputFlag(add, &o.output, "text", "text, json or yaml (the files imported, the chunk list, the SKU's new image)")
	logFormatFlag(add, &o.logFormat)
	cmd.AddCommand(add)
	return cmd
}

// addResult is artifacts add's -o json|yaml.
type addResult struct {
	Store   string              `json:"store" yaml:"store"`
	Files   []addedFile         `json:"files" yaml:"files"`
	SKU     string              `json:"sku,omitempty" yaml:"sku,omitempty"`
	OSImage *manifests.Artifact `json:"os_image,omitempty" yaml:"os_image,omitempty"`
	Chunks  *addedChunks        `json:"chunk_list,omitempty" yaml:"chunk_list,omitempty"`
}

type addedFile struct {
	File   string `json:"file" yaml:"file"`
	SHA256 string `json:"sha256" yaml:"sha256"`
	Size   int64  `json:"size" yaml:"size"`
}

type addedChunks struct {
	SHA256 string `json:"sha256" yaml:"sha256"`
	Alg    string `json:"alg" yaml:"alg"`
	Chunks int    `json:"chunks" yaml:"chunks"`
	Bytes  int64  `json:"chunk_bytes" yaml:"chunk_bytes"`
}

// checkAdd refuses a command line artifacts add cannot do (a usage error),
// and is the chunk list's digest (0: none).
func (o addOpts) check(files []string) (chunklist.Alg, error) {
	switch {
	case len(files) == 0:
		return 0, fmt.Errorf("artifacts add: no FILE given")
	case o.skuFile != "" && len(files) != 1:
		return 0, fmt.Errorf("artifacts add: --sku takes one image, got %d files", len(files))
	case o.format != "" && o.skuFile == "":
		return 0, fmt.Errorf("artifacts add: --format goes with --sku")
	}
	if err := checkOutput(o.output, "text", "json", "yaml"); err != nil {
		return 0, err
	}
	if _, err := newLogger(io.Discard, o.logFormat, nil); err != nil {
		return 0, err
	}
	if o.chunkAlg == "none" {
		return 0, nil
	}
	alg, err := chunklist.ParseAlg(o.chunkAlg)
	if err != nil {
		return 0, fmt.Errorf("artifacts add: --chunks: %v (or none)", err)
	}
	return alg, nil
}

// readSKU reads and checks the SKU before anything is imported: a
// manifest that cannot take the image is the operator's first thing to fix.
func readSKU(skuFile string) ([]byte, error) {
	skuData, err := os.ReadFile(skuFile)
	if err != nil {
		return nil, err
	}
	if _, err := manifests.ParseSKU(skuFile, skuData); err != nil {
		return nil, fmt.Errorf("--sku %s:\n%v", skuFile, err)
	}
	trial := manifests.Artifact{SHA256: strings.Repeat("0", 64), Size: 1, Format: manifests.ImageRaw}
	if _, err := manifests.SetOSImage(skuFile, skuData, trial); err != nil {
		return nil, fmt.Errorf("nothing imported: %v", err)
	}
	return skuData, nil
}

func (a *app) artifactsAdd(o addOpts, files []string) error {
	alg, err := o.check(files)
	if err != nil {
		return err
	}
	if st, err := os.Stat(o.stateDir); err != nil || !st.IsDir() {
		return a.fail(1, "artifacts add", fmt.Errorf("--state-dir %s: not a state dir (make it with `provisioner-lite init --state-dir %s`)", o.stateDir, o.stateDir))
	}
	var skuData []byte
	if o.skuFile != "" {
		if skuData, err = readSKU(o.skuFile); err != nil {
			return a.fail(1, "artifacts add", err)
		}
	}
	text := o.output == "text"
	res := addResult{Store: filepath.Join(o.stateDir, "artifacts"), SKU: o.skuFile}
	var last manifests.Artifact
	for _, f := range files {
		sum, size, err := a.importArtifact(res.Store, f)
		if err != nil {
			return a.fail(1, "artifacts add", err)
		}
		if text {
			fmt.Fprintf(a.out, "%s: sha256:%s, %d bytes, in %s\n", f, sum, size, res.Store)
		}
		res.Files = append(res.Files, addedFile{File: f, SHA256: sum, Size: size})
		last = manifests.Artifact{SHA256: sum, Size: size, Format: manifests.ImageFormatOf(f)}
	}
	if o.skuFile != "" {
		if err := a.setSKUImage(o, alg, skuData, last, &res); err != nil {
			return err
		}
	}
	if !text {
		return emit(a.out, o.output, res)
	}
	return nil
}

// setSKUImage adds the image's chunk list and writes the image into the
// SKU manifest.
func (a *app) setSKUImage(o addOpts, alg chunklist.Alg, skuData []byte, last manifests.Artifact, res *addResult) error {
	text := o.output == "text"
	if o.format != "" {
		last.Format = o.format
	}
	if alg != 0 {
		sum, n, err := a.addChunkList(res.Store, bootserver.ArtifactPath(res.Store, last.SHA256), alg)
		if err != nil {
			return a.fail(1, "artifacts add", err)
		}
		last.Chunks = sum
		res.Chunks = &addedChunks{SHA256: sum, Alg: alg.String(), Chunks: n, Bytes: chunklist.DefaultChunk}
		if text {
			fmt.Fprintf(a.out, "%s: chunk list sha256:%s (%s, %d chunks of %d bytes), in %s\n", res.Files[0].File, sum, alg, n, chunklist.DefaultChunk, res.Store)
		}
	}
	edited, err := manifests.SetOSImage(o.skuFile, skuData, last)
	if err != nil {
		return a.fail(1, "artifacts add", fmt.Errorf("the image is in the store, but %s was not changed: %v", o.skuFile, err))
	}
	if err := writeFileLike(o.skuFile, edited); err != nil {
		return a.fail(1, "artifacts add", err)
	}
	res.OSImage = &last
	if text {
		fmt.Fprintf(a.out, "%s: spec.os.image is now sha256:%s, size %d, format %s", o.skuFile, last.SHA256, last.Size, last.Format)
		if last.Chunks != "" {
			fmt.Fprintf(a.out, ", chunks %s", last.Chunks)
		}
		fmt.Fprintln(a.out)
	}
	return nil
}

// progress is a bar of max bytes on stderr, nil unless stderr is a
// terminal (a log or a pipe gets no control characters).
func (a *app) progress(max int64, what string) *progressbar.ProgressBar {
	f, ok := a.errOut.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions64(max, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true), progressbar.OptionShowTotalBytes(true), progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
}

// importArtifact is bootserver.ImportArtifact with a progress bar: the
// store writes the copy to a temp file in it, whose size is the progress.
func (a *app) importArtifact(store, file string) (string, int64, error) {
	st, err := os.Stat(file)
	if err != nil {
		return "", 0, fmt.Errorf("import artifact: %w", err)
	}
	bar := a.progress(st.Size(), "copy "+filepath.Base(file))
	if bar == nil {
		return bootserver.ImportArtifact(store, file)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				bar.Set64(importedSoFar(store, st.Size()))
			}
		}
	})
	sum, size, err := bootserver.ImportArtifact(store, file)
	close(done)
	wg.Wait()
	bar.Finish()
	return sum, size, err
}

// importedSoFar is the size of the largest import under way in store (no
// larger than the file): ours, unless a coordinator imports too.
func importedSoFar(store string, max int64) int64 {
	tmps, _ := filepath.Glob(filepath.Join(store, "sha256", ".import-*"))
	var n int64
	for _, t := range tmps {
		if st, err := os.Stat(t); err == nil && st.Size() > n && st.Size() <= max {
			n = st.Size()
		}
	}
	return n
}

// addChunkList computes the chunk list of the stored image at path and
// imports it into the store beside it (an artifact of its own, named by
// its sha256, which the SKU pins).
func (a *app) addChunkList(store, path string, alg chunklist.Alg) (string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("chunk list: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if st, err := f.Stat(); err == nil {
		if bar := a.progress(st.Size(), "chunk list"); bar != nil {
			defer bar.Finish()
			r = io.TeeReader(f, bar)
		}
	}
	l, err := chunklist.Build(r, alg, chunklist.DefaultChunk)
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
