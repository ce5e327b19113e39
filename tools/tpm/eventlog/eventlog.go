// Package eventlog reads the TCG PC Client crypto-agile event log (what
// Linux serves at /sys/kernel/security/tpm0/binary_bios_measurements) and
// replays it into PCR values, so a coordinator can check that the log a
// node sent is the one its TPM's quoted PCRs were extended with, and then
// read what was measured (the boot application's Authenticode hash).
//
// Only the crypto-agile format (TCG PC Client Platform Firmware Profile,
// "Spec ID Event03") is accepted: a TPM 2.0 firmware writes it, and a SHA-1
// only log cannot be checked against a sha256 quote anyway.
//
// Why CURE's own parser and not github.com/google/go-attestation (v0.6.4)
// or github.com/google/go-eventlog (v0.0.2, its log code split out): both
// fetch from the module proxy, but their replay checks less than Check,
// and CheckBootPath's verdict rests on it (measured 2026-11-28 with a log
// this package's Writer builds):
//
//   - EventLog.Verify, when PCR 5 does not replay, retries with synthetic
//     ExitBootServices events injected into PCR 5 (three firmware-bug
//     workarounds) and returns them among the verified events: a log
//     lacking two PCR 5 events the TPM was extended with verified, with 4
//     events of which 2 the node never sent. PCR 5 is where CheckBootPath
//     reads the end of the boot path, event by event. Check refuses it,
//     naming PCR 5 and both values.
//   - a quoted PCR the log has no event for passes at any value (the
//     replay compares only a PCR it extended); Check wants the reset value.
//   - a SHA-1-only log parses; nothing bounds the events but the input
//     (here: 1 MiB, 4096 events, 64 KiB an event, and FuzzParse).
//
// Each would need checks of CURE's own around the library. Size is no
// reason either way (go build -trimpath -ldflags='-s -w', CGO_ENABLED=0; an empty
// program is 1.84 MB): a coordinator-side verifier (parse, replay, quote,
// credential challenge) is 3.13 MB with this package and tools/tpm/attest,
// 3.08 MB with go-attestation, 4.99 MB with go-eventlog plus
// tools/tpm/attest (go-eventlog pulls google.golang.org/protobuf: 40
// packages linked against 11); the node side (open the TPM, make the keys,
// quote) is 3.34 MB with tools/tpm/attest and 3.68 MB with go-attestation
// (go-tpm's legacy API besides the one the runner already links).
package eventlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Event types (TCG PC Client PFP, section 10.4.1) that CURE reads or writes.
const (
	EVPostCode                     uint32 = 0x00000001
	EVNoAction                     uint32 = 0x00000003
	EVSeparator                    uint32 = 0x00000004
	EVAction                       uint32 = 0x00000005
	EVSCRTMVersion                 uint32 = 0x00000008
	EVEFIVariableDriverConfig      uint32 = 0x80000001
	EVEFIBootServicesApplication   uint32 = 0x80000003
	EVEFIAction                    uint32 = 0x80000007
	EVEFIPlatformFirmwareBlob      uint32 = 0x80000008
	EVEFIVariableAuthority         uint32 = 0x800000E0
	EVIPL                          uint32 = 0x0000000D
	EVEventTag                     uint32 = 0x00000006
	EVEFIHandoffTables             uint32 = 0x80000009
	EVEFIVariableBoot              uint32 = 0x80000002
	EVEFIGPTEvent                  uint32 = 0x80000006
	EVEFIBootServicesDriver        uint32 = 0x80000004
	EVCompactHash                  uint32 = 0x0000000C
	EVEFIPlatformFirmwareBlob2     uint32 = 0x8000000A
	EVEFIHandoffTables2            uint32 = 0x8000000B
	EVEFIVariableBoot2             uint32 = 0x8000000C
	EVEFIHCRTMEvent                uint32 = 0x80000010
	EVEFISPDMFirmwareBlob          uint32 = 0x800000E1
	EVEFIRuntimeServicesDriver     uint32 = 0x80000005
	EVEFIVariableDriverConfigOther uint32 = 0x800000E2
)

// TCG algorithm ids of the digests a log may carry.
const (
	AlgSHA1   uint16 = 0x0004
	AlgSHA256 uint16 = 0x000B
	AlgSHA384 uint16 = 0x000C
	AlgSHA512 uint16 = 0x000D
	AlgSM3    uint16 = 0x0012
)

// Bounds a log is read under: a real firmware log is tens of KiB with a few
// hundred events; a hostile one must not make the coordinator allocate more.
const (
	MaxLogBytes  = 1 << 20
	MaxEvents    = 4096
	maxEventData = 64 << 10
	numPCRs      = 24
)

// Event is one measurement of the log, with its sha256 digest (the bank
// CURE checks).
type Event struct {
	Index  int    // position in the log, 0 for the Spec ID header
	PCR    uint32 // PCR index
	Type   uint32
	SHA256 []byte // nil when the event carries no sha256 digest (EV_NO_ACTION)
	Data   []byte
}

// Log is a parsed crypto-agile log.
type Log struct {
	Events []Event
	// algs is the digest size of every algorithm the Spec ID event names.
	algs map[uint16]uint16
	// locality is the startup locality (StartupLocality event), 0 if none.
	locality byte
}

var specIDSignature = []byte("Spec ID Event03\x00")
var startupLocality = []byte("StartupLocality\x00")

// Parse reads a crypto-agile event log. Errors name the event's position
// and byte offset.
func Parse(raw []byte) (*Log, error) {
	if len(raw) > MaxLogBytes {
		return nil, fmt.Errorf("event log: %d bytes, more than the %d accepted", len(raw), MaxLogBytes)
	}
	r := &reader{b: raw}
	// The header is a TCG_PCR_EVENT (SHA-1 format) carrying the Spec ID event.
	pcr, typ := r.u32(), r.u32()
	r.skip(20)
	size := r.u32()
	data := r.bytes(size, maxEventData)
	if r.err != nil {
		return nil, fmt.Errorf("event log: header: %w", r.err)
	}
	if pcr != 0 || typ != EVNoAction || !bytes.HasPrefix(data, specIDSignature) {
		return nil, errors.New("event log: header is not a crypto-agile Spec ID Event03 (a SHA-1 only log cannot be checked against a sha256 quote)")
	}
	algs, err := parseSpecID(data)
	if err != nil {
		return nil, err
	}
	if _, ok := algs[AlgSHA256]; !ok {
		return nil, errors.New("event log: the Spec ID event names no sha256 bank")
	}
	l := &Log{algs: algs, Events: []Event{{Index: 0, PCR: 0, Type: EVNoAction, Data: data}}}
	for r.off < len(raw) {
		if len(l.Events) > MaxEvents {
			return nil, fmt.Errorf("event log: more than %d events", MaxEvents)
		}
		start := r.off
		ev := Event{Index: len(l.Events), PCR: r.u32(), Type: r.u32()}
		n := r.u32()
		if r.err == nil && n > uint32(len(algs)) {
			return nil, fmt.Errorf("event log: event %d at byte %d: %d digests, the Spec ID event names %d algorithms", ev.Index, start, n, len(algs))
		}
		for i := uint32(0); i < n && r.err == nil; i++ {
			alg := r.u16()
			sz, ok := algs[alg]
			if r.err == nil && !ok {
				return nil, fmt.Errorf("event log: event %d at byte %d: digest algorithm 0x%04x not named in the Spec ID event", ev.Index, start, alg)
			}
			d := r.bytes(uint32(sz), 64)
			if alg == AlgSHA256 {
				ev.SHA256 = bytes.Clone(d)
			}
		}
		ev.Data = bytes.Clone(r.bytes(r.u32(), maxEventData))
		if r.err != nil {
			return nil, fmt.Errorf("event log: event %d at byte %d: %w", ev.Index, start, r.err)
		}
		if ev.PCR >= numPCRs {
			return nil, fmt.Errorf("event log: event %d at byte %d: PCR %d (a PC Client TPM has %d)", ev.Index, start, ev.PCR, numPCRs)
		}
		if ev.Type != EVNoAction && ev.SHA256 == nil {
			return nil, fmt.Errorf("event log: event %d at byte %d (PCR %d, type 0x%08x): no sha256 digest", ev.Index, start, ev.PCR, ev.Type)
		}
		if ev.Type == EVNoAction && ev.PCR == 0 && bytes.HasPrefix(ev.Data, startupLocality) && len(ev.Data) > len(startupLocality) {
			l.locality = ev.Data[len(startupLocality)]
		}
		l.Events = append(l.Events, ev)
	}
	return l, nil
}

// parseSpecID reads the algorithm list of a TCG_EfiSpecIDEvent.
func parseSpecID(data []byte) (map[uint16]uint16, error) {
	r := &reader{b: data, off: len(specIDSignature)}
	r.u32()   // platformClass
	r.skip(3) // specVersionMinor, specVersionMajor, specErrata
	r.skip(1) // uintnSize
	n := r.u32()
	if r.err == nil && (n == 0 || n > 16) {
		return nil, fmt.Errorf("event log: Spec ID event names %d algorithms", n)
	}
	algs := map[uint16]uint16{}
	for i := uint32(0); i < n && r.err == nil; i++ {
		alg, size := r.u16(), r.u16()
		if size == 0 || size > 64 {
			return nil, fmt.Errorf("event log: Spec ID event: algorithm 0x%04x has digest size %d", alg, size)
		}
		algs[alg] = size
	}
	if r.err != nil {
		return nil, fmt.Errorf("event log: Spec ID event: %w", r.err)
	}
	if algs[AlgSHA256] != 0 && algs[AlgSHA256] != sha256.Size {
		return nil, fmt.Errorf("event log: Spec ID event: sha256 digest size %d", algs[AlgSHA256])
	}
	return algs, nil
}

// Replay extends every event's sha256 digest into its PCR, from the reset
// value (zeros; PCR 0 starts at the startup locality), and returns the PCR
// values the log implies, for the PCRs it touches.
func (l *Log) Replay() map[uint32][]byte {
	pcrs := map[uint32][]byte{}
	for _, ev := range l.Events {
		if ev.Type == EVNoAction || ev.SHA256 == nil {
			continue // not extended (TCG PFP 10.4.1)
		}
		cur, ok := pcrs[ev.PCR]
		if !ok {
			cur = make([]byte, sha256.Size)
			if ev.PCR == 0 {
				cur[sha256.Size-1] = l.locality
			}
		}
		h := sha256.New()
		h.Write(cur)
		h.Write(ev.SHA256)
		pcrs[ev.PCR] = h.Sum(nil)
	}
	return pcrs
}

// Check replays the log and compares it with quoted PCR values (sha256 bank):
// every quoted PCR the log touches must equal its replay, and a quoted PCR
// the log does not touch must still be at its reset value. It returns one
// error naming the first PCR that differs, with both values.
func (l *Log) Check(quoted map[uint32][]byte) error {
	replay := l.Replay()
	for _, pcr := range sortedKeys(quoted) {
		want, ok := replay[pcr]
		if !ok {
			want = make([]byte, sha256.Size)
			if pcr == 0 {
				want[sha256.Size-1] = l.locality
			}
		}
		if !bytes.Equal(want, quoted[pcr]) {
			return &MismatchError{PCR: pcr, Log: hex.EncodeToString(want), Quoted: hex.EncodeToString(quoted[pcr])}
		}
	}
	return nil
}

// MismatchError is a quoted PCR the log does not replay to.
type MismatchError struct {
	PCR         uint32
	Log, Quoted string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("PCR %d: the event log replays to %s, the TPM quoted %s", e.PCR, e.Log, e.Quoted)
}

// Digests are the sha256 digests of the events of one type in one PCR, in
// log order (e.g. PCR 4's EV_EFI_BOOT_SERVICES_APPLICATION events: the
// Authenticode hashes of the EFI applications the firmware started).
func (l *Log) Digests(pcr, typ uint32) [][]byte {
	var out [][]byte
	for _, ev := range l.Events {
		if ev.PCR == pcr && ev.Type == typ && ev.SHA256 != nil {
			out = append(out, ev.SHA256)
		}
	}
	return out
}

func sortedKeys(m map[uint32][]byte) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

// reader is a little-endian cursor that remembers its first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = fmt.Errorf("truncated: %d bytes wanted at byte %d, %d left", n, r.off, len(r.b)-r.off)
		return false
	}
	return true
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) skip(n int) {
	if r.need(n) {
		r.off += n
	}
}

func (r *reader) bytes(n uint32, limit uint32) []byte {
	if r.err == nil && n > limit {
		r.err = fmt.Errorf("a field of %d bytes at byte %d, more than the %d accepted", n, r.off, limit)
		return nil
	}
	if !r.need(int(n)) {
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

// typeNames are the TCG names of the event types a refusal may name.
var typeNames = map[uint32]string{
	EVPostCode: "EV_POST_CODE", EVNoAction: "EV_NO_ACTION", EVSeparator: "EV_SEPARATOR", EVAction: "EV_ACTION",
	EVSCRTMVersion: "EV_S_CRTM_VERSION", EVEFIVariableDriverConfig: "EV_EFI_VARIABLE_DRIVER_CONFIG",
	EVEFIBootServicesApplication: "EV_EFI_BOOT_SERVICES_APPLICATION", EVEFIAction: "EV_EFI_ACTION",
	EVEFIPlatformFirmwareBlob: "EV_EFI_PLATFORM_FIRMWARE_BLOB", EVEFIVariableAuthority: "EV_EFI_VARIABLE_AUTHORITY",
	EVIPL: "EV_IPL", EVEventTag: "EV_EVENT_TAG", EVEFIHandoffTables: "EV_EFI_HANDOFF_TABLES", EVEFIVariableBoot: "EV_EFI_VARIABLE_BOOT",
	EVEFIGPTEvent: "EV_EFI_GPT_EVENT", EVEFIBootServicesDriver: "EV_EFI_BOOT_SERVICES_DRIVER", EVCompactHash: "EV_COMPACT_HASH",
	EVEFIPlatformFirmwareBlob2: "EV_EFI_PLATFORM_FIRMWARE_BLOB2", EVEFIHandoffTables2: "EV_EFI_HANDOFF_TABLES2",
	EVEFIVariableBoot2: "EV_EFI_VARIABLE_BOOT2", EVEFIHCRTMEvent: "EV_EFI_HCRTM_EVENT", EVEFISPDMFirmwareBlob: "EV_EFI_SPDM_FIRMWARE_BLOB",
	EVEFIRuntimeServicesDriver: "EV_EFI_RUNTIME_SERVICES_DRIVER", EVEFIVariableDriverConfigOther: "EV_EFI_VARIABLE_DRIVER_CONFIG (other)",
}

// TypeName is the TCG name of an event type (its number where unknown).
func TypeName(typ uint32) string {
	if n, ok := typeNames[typ]; ok {
		return n
	}
	return fmt.Sprintf("event type 0x%08x", typ)
}
