package nodes

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Password references as store.Node.BMCPasswordRef holds them.
const (
	RefEnv  = "env:"
	RefFile = "file:"
)

// Limits on files the inventory names: a password or a CA bundle, never a
// device or a log that happens to be at that path.
const (
	maxPasswordFile = 4 << 10
	maxCAFile       = 1 << 20
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ResolvePassword returns node n's BMC password: the literal one, or the
// value of the environment variable or file its BMCPasswordRef names, read
// now (the store keeps only the reference). A file loses one trailing
// newline and must not be readable by group or others; an empty value is an
// error.
func ResolvePassword(n store.Node) (string, error) {
	switch {
	case n.BMCPassword != "" && n.BMCPasswordRef != "":
		return "", fmt.Errorf("node %s: both a literal BMC password and a reference (%s): give one", n.ID, n.BMCPasswordRef)
	case n.BMCPassword != "":
		return n.BMCPassword, nil
	case n.BMCPasswordRef == "":
		return "", fmt.Errorf("node %s: no BMC password: give password, passwordEnv or passwordFile in the inventory", n.ID)
	}
	pw, err := resolveRef(n.BMCPasswordRef)
	if err != nil {
		return "", fmt.Errorf("node %s: BMC password: %w", n.ID, err)
	}
	return pw, nil
}

// PasswordSource says where node n's BMC password comes from, for the
// message of a refused login (never the password).
func PasswordSource(n store.Node) string {
	switch ref := n.BMCPasswordRef; {
	case strings.HasPrefix(ref, RefEnv):
		return fmt.Sprintf("read from the coordinator's environment variable %s (passwordEnv of node %s)", strings.TrimPrefix(ref, RefEnv), n.ID)
	case strings.HasPrefix(ref, RefFile):
		return fmt.Sprintf("read from %s on the coordinator (passwordFile of node %s)", strings.TrimPrefix(ref, RefFile), n.ID)
	case n.BMCPassword != "":
		return fmt.Sprintf("node %s's password as the inventory gave it (sealed in the coordinator's store; change it with curectl nodes add or import)", n.ID)
	}
	return ""
}

func resolveRef(ref string) (string, error) {
	switch {
	case strings.HasPrefix(ref, RefEnv):
		name := strings.TrimPrefix(ref, RefEnv)
		if !envNameRE.MatchString(name) {
			return "", fmt.Errorf("passwordEnv %s: not an environment variable name", quote(name))
		}
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s (passwordEnv) is unset or empty", name)
		}
		return v, nil
	case strings.HasPrefix(ref, RefFile):
		return readPasswordFile(strings.TrimPrefix(ref, RefFile))
	}
	return "", fmt.Errorf("password reference %s: want env:NAME or file:/path", quote(ref))
}

func readPasswordFile(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("passwordFile %s: not an absolute path", quote(path))
	}
	b, mode, err := readRegular(path, maxPasswordFile)
	if err != nil {
		return "", fmt.Errorf("passwordFile: %w", err)
	}
	if mode&0o044 != 0 {
		return "", fmt.Errorf("passwordFile %s is readable by group or others (mode %04o): chmod 600 it", path, mode)
	}
	s := strings.TrimSuffix(string(b), "\n")
	s = strings.TrimSuffix(s, "\r")
	if s == "" {
		return "", fmt.Errorf("passwordFile %s is empty", path)
	}
	return s, nil
}

// readRegular reads a regular file of at most limit bytes. It opens without
// blocking, so a FIFO at the path is refused instead of waited on.
func readRegular(path string, limit int64) ([]byte, os.FileMode, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, 0, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, st.Mode().Perm(), nil
}

// LoadCABundle reads a PEM file of CA certificates for verifying BMCs. It
// must hold at least one certificate; anything else in it is an error, so a
// key or a truncated file pasted by mistake is noticed.
func LoadCABundle(path string) (*x509.CertPool, error) {
	b, _, err := readRegular(path, maxCAFile)
	if err != nil {
		return nil, err
	}
	return ParseCABundle(path, b)
}

// ParseCABundle is LoadCABundle's check of bytes already read (a bundle
// sent through the API); name is used in errors.
func ParseCABundle(path string, b []byte) (*x509.CertPool, error) {
	if len(b) > maxCAFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxCAFile)
	}
	pool := x509.NewCertPool()
	n := 0
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %d is a %s, not a CERTIFICATE", path, n+1, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("%s: a PEM block after certificate %d does not decode (truncated?)", path, n)
	}
	return pool, nil
}

// errNoPassword is the one error every "which password" problem shares.
var errNoPassword = errors.New("password, passwordEnv or passwordFile required")
