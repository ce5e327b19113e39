// package imagereport: the parts of an image's report.json the coordinator checks a boot against.
package imagereport

import (
	"encoding/json"
	"fmt"
	"os"
)

// UKI is the signed unified kernel image the builder emits beside vmlinuz.
type UKI struct {
	File               string            `json:"file"`                // e.g. "cure.efi", beside vmlinuz
	SHA256             string            `json:"sha256"`              // of the signed file
	AuthenticodeSHA256 string            `json:"authenticode_sha256"` // PE image hash, what firmware measures into PCR 4
	SignerSHA256       string            `json:"signer_sha256"`       // sha256 of the DER signing certificate
	PCRs               map[string]string `json:"pcrs"`                // sha256-bank PCR index ("4","9","11",...) -> expected hex value after a correct boot
}

// Report is what the coordinator reads of report.json; the builder writes more.
type Report struct {
	UKI *UKI `json:"uki,omitempty"`
	// Arch is the image's architecture (cure-build --arch); empty in a
	// report of a build before it had one, which was amd64.
	Arch string `json:"arch,omitempty"`
}

// Load reads path's report.json; a report without "uki" gives a nil UKI.
func Load(path string) (*Report, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}
