package release

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Shells are the completions generated for each documented program, with
// where Debian's shells look for them.
var Shells = []struct {
	Shell, Dir string
	File       func(prog string) string
}{
	{"bash", "/usr/share/bash-completion/completions", func(p string) string { return p }},
	{"zsh", "/usr/share/zsh/vendor-completions", func(p string) string { return "_" + p }},
	{"fish", "/usr/share/fish/vendor_completions.d", func(p string) string { return p + ".fish" }},
}

// Documented are the programs whose man pages and completions come from
// running them (`PROG man --dir DIR`, `PROG completion SHELL`).
var Documented = []string{"curectl", "provisioner-lite"}

// genDocs runs each documented program in binDir and writes its man pages,
// gzipped, to out/man and its completions to out/<shell>/.
func genDocs(ctx context.Context, binDir, out string) error {
	for _, prog := range Documented {
		if err := genMan(ctx, filepath.Join(binDir, prog), filepath.Join(out, "man")); err != nil {
			return err
		}
		for _, sh := range Shells {
			script, err := runProg(ctx, filepath.Join(binDir, prog), "completion", sh.Shell)
			if err != nil {
				return err
			}
			dir := filepath.Join(out, sh.Shell)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("completions: %w", err)
			}
			if err := os.WriteFile(filepath.Join(dir, sh.File(prog)), script, 0o644); err != nil {
				return fmt.Errorf("completions: %w", err)
			}
		}
	}
	return nil
}

// genMan has bin write its man pages into a scratch dir, then gzips each
// (-n: no name or time in the header, so the package is reproducible).
func genMan(ctx context.Context, bin, out string) error {
	raw, err := os.MkdirTemp("", "cure-man-")
	if err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	defer os.RemoveAll(raw)
	if _, err := runProg(ctx, bin, "man", "--dir", raw); err != nil {
		return err
	}
	pages, err := filepath.Glob(filepath.Join(raw, "*.1"))
	if err != nil || len(pages) == 0 {
		return fmt.Errorf("%s man --dir wrote no NAME.1 page", filepath.Base(bin))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("man pages: %w", err)
		}
		var gz bytes.Buffer
		w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		w.ModTime = time.Time{}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("man pages: gzip %s: %w", p, err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("man pages: gzip %s: %w", p, err)
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(p)+".gz"), gz.Bytes(), 0o644); err != nil {
			return fmt.Errorf("man pages: %w", err)
		}
	}
	return nil
}

// runProg runs a built program for its generated output, bounded in time;
// a program without the subcommand fails naming it.
func runProg(ctx context.Context, bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w (does it have the %q subcommand?): %s",
			filepath.Base(bin), strings.Join(args, " "), err, args[0], strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
