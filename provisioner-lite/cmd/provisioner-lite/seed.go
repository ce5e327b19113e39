package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
)

// `provisioner-lite seed`: the state dir of an instance whose shared
// secrets come mounted read-only (a Kubernetes Secret volume), copied into
// a private, writable state dir, because statedir.Open narrows the dir to
// 0700 and the key to 0600 and the coordinator writes its server
// certificate, lock and artifacts beside them.

func init() { subcommands["seed"] = runSeed }

const seedUsage = `usage: provisioner-lite seed --from DIR --state-dir DIR [--https-boot]

Copies the secrets instances sharing a database must share from DIR (a
mounted Kubernetes Secret: one file per key) into the state dir, created 0700,
each file 0600: state.key (32 bytes) and the CA (ca.pem, ca-key.pem) are
required; boot-ca.pem, boot-ca-key.pem, boot-tls.pem, boot-tls-key.pem,
secureboot.pem and webhook.secret are taken when present. A file already in the
state dir must be equal (a different state key would make the database's sealed
secrets unreadable). --https-boot requires the boot CA (boot-ca.pem with its key,
or the listener's offline boot-tls.pem and boot-tls-key.pem): without it each
instance would make its own, and firmware trusts one.
Exit codes: 0 seeded, 1 refused or failed, 2 usage.
`

// seedFiles maps a Secret key to its path in the state dir.
var seedFiles = map[string]string{
	statedir.KeyFile:       statedir.KeyFile,
	pki.CACertFile:         "pki/" + pki.CACertFile,
	pki.CAKeyFile:          "pki/" + pki.CAKeyFile,
	pki.BootCACertFile:     "pki/" + pki.BootCACertFile,
	pki.BootCAKeyFile:      "pki/" + pki.BootCAKeyFile,
	pki.BootTLSCertFile:    "pki/" + pki.BootTLSCertFile,
	pki.BootTLSKeyFile:     "pki/" + pki.BootTLSKeyFile,
	pki.SecureBootCertFile: "pki/" + pki.SecureBootCertFile,
	"webhook.secret":       "webhook.secret",
}

// runSeed is `provisioner-lite seed`.
func runSeed(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the mounted Secret: one file per key")
	stateDir := fs.String("state-dir", "", "the state dir to seed (created 0700)")
	httpsBoot := fs.Bool("https-boot", false, "require the boot CA (the instances serve --https-listen)")
	err := fs.Parse(normalizeSeedArgs(args))
	if err == flag.ErrHelp {
		fmt.Fprint(out, seedUsage)
		return 0
	}
	if err != nil || fs.NArg() > 0 || *from == "" || *stateDir == "" {
		if err != nil {
			fmt.Fprintln(os.Stderr, "seed:", err)
		}
		fmt.Fprint(os.Stderr, seedUsage)
		return 2
	}
	n, err := seedStateDir(*from, *stateDir, *httpsBoot)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seed:", err)
		return 1
	}
	fmt.Fprintf(out, "state dir %s seeded from %s (%d files)\n", *stateDir, *from, n)
	return 0
}

// normalizeSeedArgs lets --flag and -flag mean the same, as everywhere.
func normalizeSeedArgs(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "--") && len(a) > 2 {
			out[i] = a[1:]
		}
	}
	return out
}

// seedStateDir copies the known files of from into stateDir and returns
// how many it took.
func seedStateDir(from, stateDir string, httpsBoot bool) (int, error) {
	found, err := readSeed(from)
	if err != nil {
		return 0, err
	}
	if err := checkSeed(from, found, httpsBoot); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "pki"), 0o700); err != nil {
		return 0, fmt.Errorf("state dir %s: %w", stateDir, err)
	}
	for _, d := range []string{stateDir, filepath.Join(stateDir, "pki")} {
		if err := os.Chmod(d, 0o700); err != nil {
			return 0, fmt.Errorf("state dir %s: %w", d, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(found)) {
		dst := filepath.Join(stateDir, filepath.FromSlash(seedFiles[k]))
		if err := writeSeedFile(dst, found[k]); err != nil {
			return 0, fmt.Errorf("%s (from %s): %w", dst, filepath.Join(from, k), err)
		}
	}
	return len(found), nil
}

// readSeed reads the Secret's files: every visible entry must be a known
// key (a Secret volume's own ..data links are hidden entries).
func readSeed(from string) (map[string][]byte, error) {
	entries, err := os.ReadDir(from)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	found := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if _, ok := seedFiles[name]; !ok {
			return nil, fmt.Errorf("%s: unknown key %q: the keys are %s", from, name, strings.Join(slices.Sorted(maps.Keys(seedFiles)), ", "))
		}
		b, err := os.ReadFile(filepath.Join(from, name)) // follows the Secret's links
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		found[name] = b
	}
	return found, nil
}

// checkSeed refuses a Secret that would make instances disagree.
func checkSeed(from string, found map[string][]byte, httpsBoot bool) error {
	has := func(k string) bool { _, ok := found[k]; return ok }
	var errs []error
	if k, ok := found[statedir.KeyFile]; !ok {
		errs = append(errs, fmt.Errorf("%s: no %s: every instance needs the fleet's state key", from, statedir.KeyFile))
	} else if len(k) != 32 {
		errs = append(errs, fmt.Errorf("%s: %s is %d bytes, want 32 (the file provisioner-lite init wrote, not its text)", from, statedir.KeyFile, len(k)))
	}
	if !has(pki.CACertFile) || !has(pki.CAKeyFile) {
		errs = append(errs, fmt.Errorf("%s: want both %s and %s: an instance without them makes its own CA, which the image does not trust", from, pki.CACertFile, pki.CAKeyFile))
	}
	bootKey := has(pki.BootCAKeyFile) || has(pki.BootTLSCertFile) && has(pki.BootTLSKeyFile)
	switch {
	case has(pki.BootCACertFile) && !bootKey:
		errs = append(errs, fmt.Errorf("%s: %s without %s or the offline pair %s and %s", from, pki.BootCACertFile, pki.BootCAKeyFile, pki.BootTLSCertFile, pki.BootTLSKeyFile))
	case httpsBoot && !has(pki.BootCACertFile):
		errs = append(errs, fmt.Errorf("%s: --https-boot: no %s: each instance would make its own boot CA, and firmware trusts one (docs/KEYS.md)", from, pki.BootCACertFile))
	}
	return errors.Join(errs...)
}

// writeSeedFile writes b at dst 0600, or checks that dst already holds b.
func writeSeedFile(dst string, b []byte) error {
	old, err := os.ReadFile(dst)
	switch {
	case err == nil && bytes.Equal(old, b):
		return os.Chmod(dst, 0o600)
	case err == nil:
		return errors.New("already there and different: refusing to replace it (a new pod starts from an empty state dir)")
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
