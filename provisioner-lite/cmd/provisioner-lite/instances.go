package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/coordinator"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Several instances behind one address: their flags, and
// `provisioner-lite manifests push`, which stores the bundle every
// instance started with --manifests-from-store loads.

// flagAdder is what both flag sets (the standard library's and pflag's)
// offer: the instance flags register on either.
type flagAdder interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// registerInstanceFlags registers --artifact-mirror,
// --manifests-from-store and --peer-url, defaulting to c's values.
func registerInstanceFlags(fs flagAdder, c *coordinator.Config) {
	fs.StringVar(&c.Shared.ArtifactMirror, "artifact-mirror", c.Shared.ArtifactMirror,
		"object store base URL: an artifact missing here and at every peer instance is fetched from URL/<sha256>, verified by its hash (empty: peers only)")
	fs.BoolVar(&c.Shared.ManifestsFromStore, "manifests-from-store", c.Shared.ManifestsFromStore,
		"run the newest manifest bundle in the store (provisioner-lite manifests push) instead of --manifests, and pick up a newer one as it is pushed")
	fs.StringVar(&c.Shared.PeerURL, "peer-url", c.Shared.PeerURL,
		"http(s) base URL the other instances fetch artifacts from this very instance at, recorded in the instance registry (behind one load balancer: this instance's own address, e.g. http://POD_IP:8080; empty: the boot URL nodes use)")
}

func init() { subcommands["manifests"] = runManifests }

const manifestsUsage = `usage: provisioner-lite manifests push [--db DSN] [--by NAME] DIR

Lints DIR as the coordinator does (manifests and suites) and stores it in the
database as the next manifest bundle: every instance started with
--manifests-from-store loads it within a few seconds. --db defaults to $CURE_DB.
Exit codes: 0 stored (or the same bundle already newest), 1 lint or store failure, 2 usage.
`

// runManifests is `provisioner-lite manifests ...`.
func runManifests(args []string, out io.Writer) int {
	if len(args) == 0 || args[0] != "push" {
		fmt.Fprint(os.Stderr, manifestsUsage)
		return 2
	}
	fs := flag.NewFlagSet("manifests push", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dsn := fs.String("db", os.Getenv("CURE_DB"), "database: a PostgreSQL DSN (or a SQLite file)")
	by := fs.String("by", defaultPusher(), "who pushes, recorded with the bundle")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 || *dsn == "" {
		if err != nil {
			fmt.Fprintln(os.Stderr, "manifests push:", err)
		}
		fmt.Fprint(os.Stderr, manifestsUsage)
		return 2
	}
	v, n, err := pushManifests(*dsn, fs.Arg(0), *by)
	if err != nil {
		fmt.Fprintln(os.Stderr, "manifests push:", err)
		return 1
	}
	fmt.Fprintf(out, "manifest bundle %d stored (%d files from %s)\n", v, n, fs.Arg(0))
	return 0
}

func defaultPusher() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// pushManifests lints dir and stores its files as a bundle.
func pushManifests(dsn, dir, by string) (version int64, files int, err error) {
	if err := sitecheck.Site(dir, "").Err(); err != nil {
		return 0, 0, fmt.Errorf("refused: %s does not lint: %w", dir, err)
	}
	bundle, err := readBundle(dir)
	if err != nil {
		return 0, 0, err
	}
	st, err := store.OpenDSN(dsn)
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", store.Redacted(dsn), err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := st.PutManifestBundle(ctx, bundle, by)
	return v, len(bundle), err
}

// readBundle reads the manifest files under dir (YAML and JSON; hidden
// files and directories skipped) by slash-separated relative path.
func readBundle(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	total := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), ".") && p != dir {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		ext := strings.ToLower(filepath.Ext(p))
		if e.IsDir() || !e.Type().IsRegular() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if total += len(b); total > store.MaxBundleBytes {
			return fmt.Errorf("over %d bytes of manifests", store.MaxBundleBytes)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, errors.New("refused: " + dir + " holds no manifest (.yaml, .yml, .json)")
	}
	return files, nil
}
