package pki

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ImageCA is how a CURE image records the CA baked into it: the "ca"
// object of cure-build's report.json. The coordinator compares it with its
// own CA at start, so an image and a coordinator that disagree (two state
// dirs, two CAs) fail there, with a message, instead of as a runner that
// never registers.
type ImageCA struct {
	Fingerprint string `json:"fingerprint"`    // "sha256:" + hex of the certificate's DER
	Subject     string `json:"subject"`        // for people
	NotAfter    string `json:"not_after"`      // RFC 3339
	Path        string `json:"path,omitempty"` // where it is in the image
}

// Fingerprint names a certificate: "sha256:" + lowercase hex of its DER.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DescribeCA reads the CA certificate in caPEM (the first PEM block) as an
// image records it. name is used in errors.
func DescribeCA(name string, caPEM []byte) (ImageCA, error) {
	c, err := parseCert(name, caPEM)
	if err != nil {
		return ImageCA{}, err
	}
	if !c.IsCA {
		return ImageCA{}, fmt.Errorf("pki: %s: certificate %q is not a CA", name, c.Subject.CommonName)
	}
	return ImageCA{Fingerprint: Fingerprint(c.Raw), Subject: c.Subject.String(), NotAfter: c.NotAfter.UTC().Format(time.RFC3339)}, nil
}

// ReportFile is the build report's name in an image directory.
const ReportFile = "report.json"

// ErrNoImageReport is wrapped by CheckImageCA when the image directory has
// no report.json: the image's CA cannot be checked.
var ErrNoImageReport = errors.New("no build report")

// CheckImageCA compares the CA an image in imageDir was built with (its
// report.json) with caPEM, the coordinator's. It returns the image's CA
// when they agree; otherwise an error saying how to make them agree. A
// directory without report.json gives an error wrapping ErrNoImageReport
// (the caller decides whether that is fatal).
func CheckImageCA(imageDir string, caPEM []byte, stateDir string) (ImageCA, error) {
	own, err := DescribeCA("the coordinator's CA", caPEM)
	if err != nil {
		return ImageCA{}, err
	}
	path := filepath.Join(imageDir, ReportFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ImageCA{}, fmt.Errorf("%s: %w: the CA baked into the image cannot be checked", path, ErrNoImageReport)
	}
	if err != nil {
		return ImageCA{}, fmt.Errorf("image report: %w", err)
	}
	var rep struct {
		Kind string   `json:"kind"`
		CA   *ImageCA `json:"ca"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return ImageCA{}, fmt.Errorf("image report %s: %w", path, err)
	}
	rebuild := fmt.Sprintf("rebuild the image with this coordinator's CA: cure-build --state-dir %s --out %s (make image STATE=%s)", stateDir, imageDir, stateDir)
	switch {
	case rep.CA == nil || rep.CA.Fingerprint == "":
		return ImageCA{}, fmt.Errorf("the image in %s records no CA (%s was written by a cure-build without --state-dir/--ca, or an older one): runners would not trust this coordinator; %s",
			imageDir, path, rebuild)
	case !strings.EqualFold(rep.CA.Fingerprint, own.Fingerprint):
		return *rep.CA, fmt.Errorf("the image in %s trusts another CA than this coordinator's: image %s (%s), coordinator %s (%s, %s): its runners would never register; "+
			"%s, or start the coordinator with the state dir the image was built from",
			imageDir, rep.CA.Fingerprint, rep.CA.Subject, own.Fingerprint, filepath.Join(stateDir, "pki", CACertFile), own.Subject, rebuild)
	}
	return *rep.CA, nil
}
