package uki

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// What a correct boot of the signed image extends into the sha256 bank
// (TCG PC Client PFP; systemd-stub 252; Linux 6.1's EFI stub). Firmware
// PCRs (0-3, 7) depend on the machine and are recorded, not predicted.
const (
	// PCRBootApps: EDK2 measures, at the first boot attempt, the action
	// "Calling EFI Application from Boot Option" and the separator, then
	// every PE image it loads outside its own firmware volumes: the UKI,
	// and the kernel the stub loads through LoadImage.
	PCRBootApps = 4
	// PCRKernelInitrd: Linux's EFI stub measures the initrd it loads
	// through LINUX_EFI_INITRD_MEDIA_GUID (the stub's .initrd).
	PCRKernelInitrd = 9
	// PCRKernelImage: systemd-stub measures each section it uses, its
	// name (with the NUL) and then its contents, in this order.
	PCRKernelImage = 11
)

// stubSections are the sections systemd-stub 252 measures, in its order.
var stubSections = []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb"}

// callingEFIApp is EDK2's EV_EFI_ACTION at the first boot attempt.
const callingEFIApp = "Calling EFI Application from Boot Option"

func extend(pcr []byte, digest []byte) []byte {
	h := sha256.New()
	h.Write(pcr)
	h.Write(digest)
	return h.Sum(nil)
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// PredictPCRs are the sha256 PCR values a correct boot of the signed image
// b produces, by PCR index.
func PredictPCRs(b []byte) (map[string]string, error) {
	l, err := parsePE(b)
	if err != nil {
		return nil, err
	}
	ukiHash, err := AuthenticodeSHA256(b)
	if err != nil {
		return nil, err
	}
	zero := make([]byte, sha256.Size)
	p4 := extend(zero, sha([]byte(callingEFIApp)))
	p4 = extend(p4, sha([]byte{0, 0, 0, 0})) // EV_SEPARATOR
	p4 = extend(p4, ukiHash)
	if k, ok := l.section(b, ".linux"); ok {
		kh, err := AuthenticodeSHA256(k)
		if err != nil {
			return nil, err
		}
		p4 = extend(p4, kh)
	}
	p11 := zero
	for _, name := range stubSections {
		data, ok := l.section(b, name)
		if !ok {
			continue
		}
		p11 = extend(p11, sha(append([]byte(name), 0)))
		p11 = extend(p11, sha(data))
	}
	out := map[string]string{
		strconv.Itoa(PCRBootApps):    hex.EncodeToString(p4),
		strconv.Itoa(PCRKernelImage): hex.EncodeToString(p11),
	}
	if initrd, ok := l.section(b, ".initrd"); ok {
		out[strconv.Itoa(PCRKernelInitrd)] = hex.EncodeToString(extend(zero, sha(initrd)))
	}
	return out, nil
}
