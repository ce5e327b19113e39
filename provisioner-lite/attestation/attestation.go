// Package attestation is the coordinator's judge of measured boot: it
// issues single-use challenges bound to a boot (BeginAttestation), and
// checks a boot's answer: the credential only the EK's TPM could activate
// for the AK, the quote's signature, nonce and PCR digest, the event log's
// replay against the quoted PCRs, and the boot PCRs against the image's
// report.json (expected values, or its Authenticode hash as a boot
// application measured into PCR 4). It holds no store: the caller records
// verdicts, EKs and firmware measurements.
//
// The event log and the quote are checked by CURE's own tools/tpm/eventlog
// and tools/tpm/attest, not go-attestation or go-eventlog: their replay
// injects PCR 5 events the log lacks and passes a quoted PCR the log never
// touches at any value (figures in tools/tpm/eventlog's package doc).
package attestation

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/api/imagereport"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/eventlog"
)

// FirmwarePCRs are the PCRs recorded per node and compared across boots:
// platform firmware and its configuration (0, 1), option ROMs and their
// configuration (2, 3), Secure Boot policy (7).
var FirmwarePCRs = []uint32{0, 1, 2, 3, 7}

// DefaultPCRs are quoted when the image report names no boot PCRs: the
// firmware PCRs, the boot manager's (4) and 5, where firmware measures
// ExitBootServices (the boot path's end, CheckBootPath).
var DefaultPCRs = []uint32{0, 1, 2, 3, 4, 5, 7}

// Challenge is an issued, not yet answered challenge: all a coordinator
// instance needs to judge its answer, so any instance sharing the store
// can. The credential's secret is kept as its sha256 only.
type Challenge struct {
	ID           string
	TokenHash    string
	BootID       string
	EKPublic     []byte
	EKCert       []byte
	EKChain      [][]byte // intermediate CA certificates the boot presented (DER)
	AKPublic     []byte
	PCRs         []uint32
	Nonce        []byte
	SecretSHA256 []byte
	Issued       time.Time
	Expires      time.Time
}

// secretMatches compares an activated secret with the challenge's in
// constant time (of their hashes).
func (ch *Challenge) secretMatches(activated []byte) bool {
	sum := sha256.Sum256(activated)
	return len(ch.SecretSHA256) == len(sum) && subtle.ConstantTimeCompare(sum[:], ch.SecretSHA256) == 1
}

// ErrNoChallenge is a Keeper's answer for a challenge it cannot hand out:
// never issued, spent already or pruned.
var ErrNoChallenge = errors.New("no such challenge (unknown, used already or expired): a replayed or forged attestation")

// Keeper keeps issued challenges until their answer. Take spends one:
// whatever the answer, a challenge is never handed out twice, by this
// instance or another sharing the Keeper's store.
type Keeper interface {
	Put(ctx context.Context, ch *Challenge, max int) error
	Take(ctx context.Context, id string, now time.Time) (*Challenge, error)
}

// Challenges issues and judges challenges, single use, short-lived and
// bounded in number (a flood of BeginAttestation calls evicts the oldest,
// never grows the coordinator or its store).
type Challenges struct {
	TTL time.Duration // default 2 minutes
	Max int           // default 4096
	// Keeper keeps them; nil: this instance's memory (one instance only:
	// a Hello must reach the instance that issued its challenge).
	Keeper Keeper

	once sync.Once
	mem  *Memory
}

func (cs *Challenges) keeper() Keeper {
	if cs.Keeper != nil {
		return cs.Keeper
	}
	cs.once.Do(func() { cs.mem = &Memory{} })
	return cs.mem
}

// MaxCertDER bounds each certificate a boot presents (its EK's and each
// intermediate): a TPM's EK certificate is 1-2 KiB, and every challenge
// keeps them in the store until it is used or expires.
const MaxCertDER = 8 << 10

func boundEKCerts(begin *curev1.AttestBegin) error {
	if n := len(begin.GetEkCertificate()); n > MaxCertDER {
		return fmt.Errorf("EK certificate of %d bytes: at most %d", n, MaxCertDER)
	}
	for i, der := range begin.GetEkChain() {
		if len(der) > MaxCertDER {
			return fmt.Errorf("EK intermediate certificate %d of %d bytes: at most %d", i, len(der), MaxCertDER)
		}
	}
	return nil
}

// MaxEKChain bounds the intermediates a boot may present (real chains
// have one or two).
const MaxEKChain = 4

// CheckBegin checks what a boot asks a challenge for, short of making one:
// its EK and AK are an endorsement key and a restricted, fixed,
// TPM-generated signing key, and its certificates are within bounds. A
// coordinator checks it before it charges the boot's challenge budget.
func CheckBegin(begin *curev1.AttestBegin) error {
	if n := len(begin.GetEkChain()); n > MaxEKChain {
		return fmt.Errorf("%d EK intermediate certificates: at most %d", n, MaxEKChain)
	}
	if err := boundEKCerts(begin); err != nil {
		return err
	}
	return attest.CheckKeys(begin.GetEkPublic(), begin.GetAkPublic())
}

// Issue makes a challenge for a boot's keys and keeps it.
func (cs *Challenges) Issue(ctx context.Context, tokenHash, bootID string, begin *curev1.AttestBegin, pcrs []uint32, now time.Time) (*Challenge, *curev1.AttestChallenge, error) {
	if err := boundEKCerts(begin); err != nil {
		return nil, nil, err
	}
	c, err := attest.NewChallenge(begin.GetEkPublic(), begin.GetAkPublic())
	if err != nil {
		return nil, nil, err
	}
	idb := make([]byte, 16)
	if _, err := rand.Read(idb); err != nil {
		return nil, nil, err
	}
	ttl := cs.TTL
	if ttl <= 0 {
		ttl = 2 * time.Minute
	}
	max := cs.Max
	if max <= 0 {
		max = 4096
	}
	secret := sha256.Sum256(c.Secret)
	ch := &Challenge{ID: hex.EncodeToString(idb), TokenHash: tokenHash, BootID: bootID, EKPublic: bytes.Clone(begin.GetEkPublic()),
		EKCert: bytes.Clone(begin.GetEkCertificate()), AKPublic: bytes.Clone(begin.GetAkPublic()), PCRs: slices.Clone(pcrs),
		Nonce: c.Nonce, SecretSHA256: secret[:], Issued: now, Expires: now.Add(ttl)}
	for _, der := range begin.GetEkChain() {
		ch.EKChain = append(ch.EKChain, bytes.Clone(der))
	}
	if err := cs.keeper().Put(ctx, ch, max); err != nil {
		return nil, nil, fmt.Errorf("challenge not kept: %w", err)
	}
	return ch, &curev1.AttestChallenge{ChallengeId: ch.ID, Nonce: c.Nonce, CredentialBlob: c.CredentialBlob, EncryptedSecret: c.EncryptedSecret,
		Pcrs: pcrs, ExpiresUnixMs: ch.Expires.UnixMilli()}, nil
}

// Memory keeps challenges in this process, bounded.
type Memory struct {
	mu    sync.Mutex
	byID  map[string]*Challenge
	order []string
}

// Put keeps a challenge, evicting the oldest past max.
func (m *Memory) Put(_ context.Context, ch *Challenge, max int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byID == nil {
		m.byID = map[string]*Challenge{}
	}
	for len(m.order) >= max {
		delete(m.byID, m.order[0])
		m.order = m.order[1:]
	}
	m.byID[ch.ID] = ch
	m.order = append(m.order, ch.ID)
	return nil
}

// Take removes and returns a challenge.
func (m *Memory) Take(_ context.Context, id string, _ time.Time) (*Challenge, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.byID[id]
	if ch == nil {
		return nil, ErrNoChallenge
	}
	delete(m.byID, id)
	m.order = slices.DeleteFunc(m.order, func(s string) bool { return s == id })
	return ch, nil
}

// Expected is what a boot of the image must show.
type Expected struct {
	UKI *imagereport.UKI // nil: the image report names no UKI (PXE boot of kernel+initramfs)
}

// Result is the judgement of one boot's attestation.
type Result struct {
	Status string // store.AttestPassed, AttestAbsent or AttestFailed (same names)
	Detail string
	// Mismatch names the PCR, expected and observed values of a boot PCR
	// that differs from the image's report (nil otherwise).
	Mismatch *PCRMismatch
	EKSHA256 string
	EKPublic []byte   // TPMT_PUBLIC the exchange proved (set when Passed)
	EKCert   []byte   // as the boot presented it (DER; empty: none)
	EKChain  [][]byte // intermediates the boot presented
	// PCRs are the quoted sha256 values (verified), by index.
	PCRs map[uint32][]byte
}

// PCRMismatch is a PCR whose value is not the expected one.
type PCRMismatch struct {
	PCR                uint32
	Expected, Observed string
}

func (m *PCRMismatch) String() string {
	return fmt.Sprintf("PCR %d: expected %s, observed %s", m.PCR, m.Expected, m.Observed)
}

// Statuses, spelled as the store keeps them.
const (
	Passed = "attested"
	Absent = "absent"
	Failed = "failed"
)

// Judge checks a Hello's attestation for the boot (token hash, boot id).
func (cs *Challenges) Judge(ctx context.Context, tokenHash, bootID string, a *curev1.Attestation, exp Expected, now time.Time) Result {
	if a == nil || (a.GetChallengeId() == "" && len(a.GetQuote()) == 0) {
		detail := "the boot sent no attestation"
		if a.GetError() != "" {
			detail += ": " + a.GetError()
		}
		return Result{Status: Absent, Detail: detail}
	}
	fail := func(format string, args ...any) Result {
		return Result{Status: Failed, Detail: fmt.Sprintf(format, args...)}
	}
	ch, err := cs.keeper().Take(ctx, a.GetChallengeId(), now)
	if errors.Is(err, ErrNoChallenge) {
		return fail("%v", ErrNoChallenge)
	}
	if err != nil {
		return fail("challenge %q not found: %v", a.GetChallengeId(), err)
	}
	if ch.TokenHash != tokenHash || ch.BootID != bootID {
		return fail("the challenge was issued to another boot")
	}
	if now.After(ch.Expires) {
		return fail("the challenge expired at %s", ch.Expires.UTC().Format(time.RFC3339))
	}
	fp, err := attest.EKFingerprint(ch.EKPublic)
	if err != nil {
		return fail("endorsement key: %v", err)
	}
	if !ch.secretMatches(a.GetActivatedSecret()) {
		r := fail("the credential was not activated: the attestation key is not in the TPM of endorsement key %s", fp)
		r.EKSHA256 = fp
		return r
	}
	q := &attest.Quote{Attest: a.GetQuote(), Signature: a.GetSignature(), PCRs: a.GetPcrs()}
	if err := attest.VerifyQuote(ch.AKPublic, q, ch.Nonce, ch.PCRs); err != nil {
		r := fail("%v", err)
		r.EKSHA256 = fp
		return r
	}
	res := Result{Status: Passed, EKSHA256: fp, EKPublic: ch.EKPublic, EKCert: ch.EKCert, EKChain: ch.EKChain, PCRs: map[uint32][]byte{}}
	for _, p := range ch.PCRs {
		res.PCRs[p] = a.GetPcrs()[p]
	}
	var log *eventlog.Log
	if len(a.GetEventLog()) > 0 {
		if log, err = eventlog.Parse(a.GetEventLog()); err != nil {
			return Result{Status: Failed, Detail: err.Error(), EKSHA256: fp, PCRs: res.PCRs}
		}
		if err := log.Check(res.PCRs); err != nil {
			var me *eventlog.MismatchError
			if errors.As(err, &me) {
				res.Mismatch = &PCRMismatch{PCR: me.PCR, Expected: me.Log + " (event log replay)", Observed: me.Quoted}
			}
			return Result{Status: Failed, Detail: "the event log does not replay to the quoted PCRs: " + err.Error(), EKSHA256: fp, PCRs: res.PCRs, Mismatch: res.Mismatch}
		}
	}
	if m, detail := checkImage(exp.UKI, res.PCRs, log); m != nil || detail != "" {
		res.Status, res.Detail, res.Mismatch = Failed, detail, m
		return res
	}
	res.Detail = fmt.Sprintf("quote over PCRs %v verified with an AK of EK %s", ch.PCRs, fp)
	return res
}

// checkImage compares the boot PCRs with the image's report. PCR 4 is
// judged by replaying the log's boot path (CheckBootPath: the firmware's
// own events, then the UKI's Authenticode hash as the first and only boot
// application, then ExitBootServices); a report without the hash has PCR
// 4 judged by value. Every other PCR the report names is judged by value.
func checkImage(uki *imagereport.UKI, quoted map[uint32][]byte, log *eventlog.Log) (*PCRMismatch, string) {
	if uki == nil {
		return nil, ""
	}
	for _, k := range sortedPCRKeys(uki.PCRs) {
		idx, err := strconv.ParseUint(k, 10, 32)
		if err != nil {
			return nil, fmt.Sprintf("image report names PCR %q", k)
		}
		pcr := uint32(idx)
		if pcr == BootPathPCR && uki.AuthenticodeSHA256 != "" {
			continue // the boot path, below
		}
		want := uki.PCRs[k]
		got := hex.EncodeToString(quoted[pcr])
		if quoted[pcr] == nil {
			return &PCRMismatch{PCR: pcr, Expected: want, Observed: "(not quoted)"}, fmt.Sprintf("PCR %d was not quoted", pcr)
		}
		if got != want {
			m := &PCRMismatch{PCR: pcr, Expected: want, Observed: got}
			return m, "boot measurement differs from the image's report: " + m.String()
		}
	}
	if uki.AuthenticodeSHA256 == "" {
		return nil, ""
	}
	want := "boot path: the firmware's boot actions and separator, then boot application " + uki.AuthenticodeSHA256 + " alone, then ExitBootServices"
	image, err := hex.DecodeString(uki.AuthenticodeSHA256)
	if err != nil {
		return &PCRMismatch{PCR: BootPathPCR, Expected: want, Observed: "(unreadable)"}, fmt.Sprintf("the image report's Authenticode hash %q: %v", uki.AuthenticodeSHA256, err)
	}
	if log == nil {
		return &PCRMismatch{PCR: BootPathPCR, Expected: want, Observed: "(no event log)"}, "no event log to replay the boot path from"
	}
	if err := CheckBootPath(log, image); err != nil {
		pcr := uint32(BootPathPCR)
		var be *BootPathError
		if errors.As(err, &be) {
			pcr = be.PCR
		}
		m := &PCRMismatch{PCR: pcr, Expected: want, Observed: err.Error()}
		return m, "the boot path is not the CURE image's: " + err.Error()
	}
	return nil, ""
}

func sortedPCRKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	return ks
}

// QuotePCRs are the PCRs a boot is asked to quote: the firmware PCRs, PCR
// 4, and every PCR the image report names.
func QuotePCRs(uki *imagereport.UKI) []uint32 {
	out := slices.Clone(DefaultPCRs)
	if uki != nil {
		for k := range uki.PCRs {
			if n, err := strconv.ParseUint(k, 10, 32); err == nil && n < 24 && !slices.Contains(out, uint32(n)) {
				out = append(out, uint32(n))
			}
		}
	}
	slices.Sort(out)
	return out
}

// FirmwareDrift compares a boot's firmware PCRs with a record: the first
// PCR that differs, nil if none.
func FirmwareDrift(recorded map[string]string, quoted map[uint32][]byte) *PCRMismatch {
	for _, p := range FirmwarePCRs {
		want, ok := recorded[strconv.Itoa(int(p))]
		if !ok {
			continue
		}
		if got := hex.EncodeToString(quoted[p]); got != want {
			return &PCRMismatch{PCR: p, Expected: want, Observed: got}
		}
	}
	return nil
}

// FirmwareValues are a boot's firmware PCRs as a record keeps them.
func FirmwareValues(quoted map[uint32][]byte) map[string]string {
	out := map[string]string{}
	for _, p := range FirmwarePCRs {
		if v, ok := quoted[p]; ok {
			out[strconv.Itoa(int(p))] = hex.EncodeToString(v)
		}
	}
	return out
}

// SKUPCRs are the PCRs a SKU's firmware version is known by across its
// nodes: firmware code (0), option ROMs and their configuration (2, 3),
// Secure Boot policy (7) and the boot path (4, per image). PCR 1 (platform
// configuration: SMBIOS serial numbers, boot variables) differs from node
// to node and is kept per node only.
var SKUPCRs = []uint32{0, 2, 3, 4, 7}

// BootValues are an attested boot's values as records keep them: the
// firmware PCRs and the boot path's (4).
func BootValues(quoted map[uint32][]byte) map[string]string {
	out := FirmwareValues(quoted)
	if v, ok := quoted[BootPathPCR]; ok {
		out[strconv.Itoa(BootPathPCR)] = hex.EncodeToString(v)
	}
	return out
}

// SKUValues are the values among vals that a SKU's firmware is known by.
func SKUValues(vals map[string]string) map[string]string {
	out := map[string]string{}
	for _, p := range SKUPCRs {
		if v, ok := vals[strconv.Itoa(int(p))]; ok {
			out[strconv.Itoa(int(p))] = v
		}
	}
	return out
}

// BootPathDrift compares a boot's PCR 4 with the value its SKU, firmware
// and image are known to produce (known; nil or without "4": none known
// yet) and the node's own record (own: an admin may have accepted another
// for this node): nil when either matches, or nothing is known.
func BootPathDrift(known, own map[string]string, quoted map[uint32][]byte) *PCRMismatch {
	want, ok := known[strconv.Itoa(BootPathPCR)]
	got := hex.EncodeToString(quoted[BootPathPCR])
	if !ok || want == got || own[strconv.Itoa(BootPathPCR)] == got {
		return nil
	}
	return &PCRMismatch{PCR: BootPathPCR, Expected: want, Observed: got}
}

// Rebaseline judges the first attested boot after a firmware change the
// pipeline made: each of SKUPCRs must be unchanged from the node's record
// or be what its SKU's new firmware is known to produce on another node
// (known; nil: none known). PCR 1, the node's own configuration, which a
// flash or a BIOS setting changes, is re-recorded. It returns the first
// PCR that is neither, nil if none.
func Rebaseline(recorded, known map[string]string, quoted map[uint32][]byte) *PCRMismatch {
	for _, p := range SKUPCRs {
		key := strconv.Itoa(int(p))
		v, ok := quoted[p]
		got := hex.EncodeToString(v)
		if ok && (recorded[key] == got || known[key] == got) {
			continue
		}
		exp := "unchanged " + cmp.Or(recorded[key], "(none recorded)")
		if known[key] != "" {
			exp += " or the SKU's known " + known[key]
		} else {
			exp += " (no other node of the SKU is known on this firmware)"
		}
		if !ok {
			got = "(not quoted)"
		}
		return &PCRMismatch{PCR: p, Expected: exp, Observed: got}
	}
	return nil
}
