// Package imagereport is the part of an image's report.json the
// coordinator checks a boot against: the signed unified kernel image's
// digests and the PCR values a correct boot of it produces.
package imagereport

// UKI describes the signed unified kernel image built beside vmlinuz.
type UKI struct {
	File               string            `json:"file"`                // e.g. "cure.efi", beside vmlinuz
	SHA256             string            `json:"sha256"`              // of the signed file
	AuthenticodeSHA256 string            `json:"authenticode_sha256"` // PE image hash, what firmware measures into PCR 4
	SignerSHA256       string            `json:"signer_sha256"`       // sha256 of the DER signing certificate
	PCRs               map[string]string `json:"pcrs"`                // sha256-bank PCR index ("4","9","11",...) -> expected hex value after a correct boot
}
