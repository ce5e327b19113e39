package uki

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"unicode/utf16"
)

// What a correct boot of the signed image extends into the sha256 bank
// (TCG PC Client PFP; EDK2 as in OVMF 2022.11; systemd-stub 252; Linux
// 6.1's EFI stub), checked against a swtpm's PCRs after a real boot
// (qemu-test TestSecureBootHTTPSProvision). Firmware PCRs (0-3, 7) depend
// on the machine and are recorded, not predicted.
const (
	// PCRBootApps: EDK2 measures, at the first boot attempt, the action
	// "Calling EFI Application from Boot Option" and the separator, then
	// the PE images it loads outside its own firmware volumes: here the
	// UKI alone (systemd-stub loads the embedded kernel past the
	// firmware's measurement, under its own security override).
	PCRBootApps = 4
	// PCRKernelInitrd: Linux's EFI stub measures the LoadOptions it was
	// started with (the command line as UTF-16 with its NUL, which
	// systemd-stub passes from .cmdline), then the initrd it loads through
	// LINUX_EFI_INITRD_MEDIA_GUID (the stub's .initrd).
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
	cmdline, _ := l.section(b, ".cmdline")
	if initrd, ok := l.section(b, ".initrd"); ok {
		out[strconv.Itoa(PCRKernelInitrd)] = hex.EncodeToString(extend(extend(zero, sha(loadOptions(string(cmdline)))), sha(initrd)))
	}
	return out, nil
}

// loadOptions is a command line as UEFI LoadOptions: UTF-16LE with a NUL.
func loadOptions(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u)+2)
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}
