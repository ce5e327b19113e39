package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// EK sources: how the coordinator came to trust a node's endorsement key.
const (
	EKTrustOnFirstUse = "tofu"   // the first attested boot's EK, recorded
	EKPinned          = "pinned" // the nodes file's ek_sha256
)

// NodeEK is the endorsement key a node's TPM must present.
type NodeEK struct {
	NodeID     string
	SHA256     string // of the EK's SubjectPublicKeyInfo, hex
	Source     string
	EnrolledAt time.Time
	RunID      string // the run whose boot enrolled it (tofu)
}

// NodeEK returns the node's enrolled EK; ErrNotFound if it has none.
func (s *Store) NodeEK(ctx context.Context, nodeID string) (NodeEK, error) {
	e := NodeEK{NodeID: nodeID}
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT ek_sha256, source, enrolled_at, run_id FROM node_eks WHERE node_id = ?`, nodeID).Scan(&e.SHA256, &e.Source, &at, &e.RunID)
	if errors.Is(err, sql.ErrNoRows) {
		return NodeEK{}, fmt.Errorf("store: EK of node %s: %w", nodeID, ErrNotFound)
	}
	if err != nil {
		return NodeEK{}, fmt.Errorf("store: EK of node %s: %w", nodeID, err)
	}
	e.EnrolledAt = fromMs(at)
	return e, nil
}

// EnrollEK records a node's EK on first use: only if the node has none, so
// two racing boots cannot both enroll. It returns the EK now on record.
func (s *Store) EnrollEK(ctx context.Context, e NodeEK) (NodeEK, error) {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO node_eks (node_id, ek_sha256, source, enrolled_at, run_id) VALUES (?, ?, ?, ?, ?)
ON CONFLICT(node_id) DO NOTHING`, e.NodeID, e.SHA256, EKTrustOnFirstUse, toMs(e.EnrolledAt), e.RunID)
		return err
	})
	if err != nil {
		return NodeEK{}, fmt.Errorf("store: enroll EK of node %s: %w", e.NodeID, err)
	}
	return s.NodeEK(ctx, e.NodeID)
}

// PinEK sets the EK the nodes file names for a node; an empty sha256
// removes a pin (a TOFU enrollment is left alone).
func (s *Store) PinEK(ctx context.Context, nodeID, sha string, now time.Time) error {
	err := s.tx(ctx, func(tx *Tx) error {
		if sha == "" {
			_, err := tx.ExecContext(ctx, `DELETE FROM node_eks WHERE node_id = ? AND source = 'pinned'`, nodeID)
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO node_eks (node_id, ek_sha256, source, enrolled_at, run_id) VALUES (?, ?, 'pinned', ?, '')
ON CONFLICT(node_id) DO UPDATE SET ek_sha256 = excluded.ek_sha256, source = 'pinned', enrolled_at = excluded.enrolled_at, run_id = ''`, nodeID, sha, toMs(now))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: pin EK of node %s: %w", nodeID, err)
	}
	return nil
}

// Boot attestation statuses.
const (
	AttestPassed = "attested" // quote, credential, event log and expected values all checked
	AttestAbsent = "absent"   // the boot sent no attestation (no TPM, or a runner that skipped it)
	AttestFailed = "failed"   // it sent one that did not verify: a security event
)

// BootAttestation is the coordinator's verdict on one boot's attestation,
// kept so a reconnect of the boot is judged as its first Hello was.
type BootAttestation struct {
	RunID, BootID, NodeID string
	Status                string
	Detail                string
	EKSHA256              string
	Time                  time.Time
}

// PutBootAttestation records a boot's verdict (the first Hello the
// coordinator judged sets it; a later one replaces it only to fail it).
func (s *Store) PutBootAttestation(ctx context.Context, a BootAttestation) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO boot_attestations (run_id, boot_id, node_id, status, detail, ek_sha256, time) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(run_id, boot_id) DO UPDATE SET status = excluded.status, detail = excluded.detail, ek_sha256 = excluded.ek_sha256, time = excluded.time`,
			a.RunID, a.BootID, a.NodeID, a.Status, a.Detail, a.EKSHA256, toMs(a.Time))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: attestation of boot %s of run %s: %w", a.BootID, a.RunID, err)
	}
	return nil
}

// GetBootAttestation returns a boot's verdict; ErrNotFound if none.
func (s *Store) GetBootAttestation(ctx context.Context, runID, bootID string) (BootAttestation, error) {
	a := BootAttestation{RunID: runID, BootID: bootID}
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT node_id, status, detail, ek_sha256, time FROM boot_attestations WHERE run_id = ? AND boot_id = ?`, runID, bootID).
		Scan(&a.NodeID, &a.Status, &a.Detail, &a.EKSHA256, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return BootAttestation{}, fmt.Errorf("store: attestation of boot %s: %w", bootID, ErrNotFound)
	}
	if err != nil {
		return BootAttestation{}, fmt.Errorf("store: attestation of boot %s: %w", bootID, err)
	}
	a.Time = fromMs(at)
	return a, nil
}

// RunAttestations are a run's boots' verdicts, oldest first.
func (s *Store) RunAttestations(ctx context.Context, runID string) ([]BootAttestation, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT boot_id, node_id, status, detail, ek_sha256, time FROM boot_attestations WHERE run_id = ? ORDER BY time, boot_id`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: attestations of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []BootAttestation
	for rows.Next() {
		a := BootAttestation{RunID: runID}
		var at int64
		if err := rows.Scan(&a.BootID, &a.NodeID, &a.Status, &a.Detail, &a.EKSHA256, &at); err != nil {
			return nil, err
		}
		a.Time = fromMs(at)
		out = append(out, a)
	}
	return out, rows.Err()
}

// FirmwareRecord is a node's recorded firmware measurements: the PCR values
// (sha256 bank, hex) of its first good boot after a provision or after a
// firmware change the pipeline made, with the SKU and firmware they belong to.
type FirmwareRecord struct {
	NodeID     string
	SKU        string
	Firmware   string            // the firmware versions the boot reported (SMBIOS BIOS version)
	PCRs       map[string]string // PCR index -> hex
	RunID      string
	RecordedAt time.Time
	// ChangeRun is the run whose pipeline changed the node's firmware since
	// the record (empty: none): the next attested boot re-records.
	ChangeRun, ChangeReason string
	// Hold is set while a firmware measurement drift the pipeline did not
	// cause keeps the node out of service (HoldRun is empty otherwise).
	Hold MeasurementHold
}

// MeasurementHold is a drift that holds a node: the run whose boot showed
// it, what differed, when, and the boot's values, which an operator's
// accept adopts as the node's record.
type MeasurementHold struct {
	RunID    string
	Detail   string
	At       time.Time
	PCRs     map[string]string
	Firmware string
}

// Held reports whether the record holds the node out of service.
func (f FirmwareRecord) Held() bool { return f.Hold.RunID != "" }

// ErrNotHeld is AcceptMeasurements' answer for a node without a hold.
var ErrNotHeld = errors.New("no firmware measurement hold")

// GetFirmwareRecord returns the node's record; ErrNotFound if none.
func (s *Store) GetFirmwareRecord(ctx context.Context, nodeID string) (FirmwareRecord, error) {
	f := FirmwareRecord{NodeID: nodeID}
	var pcrs, holdPCRs string
	var at, holdAt int64
	err := s.r.QueryRowContext(ctx, `SELECT sku, firmware, pcrs, run_id, recorded_at, change_run, change_reason, hold_run, hold_detail, hold_at, hold_pcrs, hold_firmware
FROM firmware_pcrs WHERE node_id = ?`, nodeID).
		Scan(&f.SKU, &f.Firmware, &pcrs, &f.RunID, &at, &f.ChangeRun, &f.ChangeReason, &f.Hold.RunID, &f.Hold.Detail, &holdAt, &holdPCRs, &f.Hold.Firmware)
	if errors.Is(err, sql.ErrNoRows) {
		return FirmwareRecord{}, fmt.Errorf("store: firmware measurements of node %s: %w", nodeID, ErrNotFound)
	}
	if err != nil {
		return FirmwareRecord{}, fmt.Errorf("store: firmware measurements of node %s: %w", nodeID, err)
	}
	if err := json.Unmarshal([]byte(pcrs), &f.PCRs); err != nil {
		return FirmwareRecord{}, fmt.Errorf("store: firmware measurements of node %s: %w", nodeID, err)
	}
	if f.Held() {
		if err := json.Unmarshal([]byte(holdPCRs), &f.Hold.PCRs); err != nil {
			return FirmwareRecord{}, fmt.Errorf("store: firmware measurement hold of node %s: %w", nodeID, err)
		}
		f.Hold.At = fromMs(holdAt)
	}
	f.RecordedAt = fromMs(at)
	return f, nil
}

// RecordFirmware replaces the node's record and clears a pending change
// and a hold (the pipeline's own reflash re-records through here).
func (s *Store) RecordFirmware(ctx context.Context, f FirmwareRecord) error {
	pcrs, err := json.Marshal(f.PCRs)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO firmware_pcrs (node_id, sku, firmware, pcrs, run_id, recorded_at, change_run, change_reason) VALUES (?, ?, ?, ?, ?, ?, '', '')
ON CONFLICT(node_id) DO UPDATE SET sku = excluded.sku, firmware = excluded.firmware, pcrs = excluded.pcrs, run_id = excluded.run_id,
	recorded_at = excluded.recorded_at, change_run = '', change_reason = '',
	hold_run = '', hold_detail = '', hold_at = 0, hold_pcrs = '{}', hold_firmware = ''`, f.NodeID, f.SKU, f.Firmware, string(pcrs), f.RunID, toMs(f.RecordedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: record firmware measurements of node %s: %w", f.NodeID, err)
	}
	return nil
}

// FirmwareChanged notes that the pipeline is changing the node's firmware
// (a flash, BIOS settings): the next attested boot re-records instead of
// flagging a drift. It is noted before the change is made, so a crash in
// between cannot turn the pipeline's own update into a false alarm.
func (s *Store) FirmwareChanged(ctx context.Context, nodeID, runID, reason string) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO firmware_pcrs (node_id, change_run, change_reason) VALUES (?, ?, ?)
ON CONFLICT(node_id) DO UPDATE SET change_run = excluded.change_run, change_reason = excluded.change_reason`, nodeID, runID, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: note firmware change of node %s: %w", nodeID, err)
	}
	return nil
}

// HoldFirmware holds the node out of service for a drift: the record's
// accepted values stay; the boot's values are kept for an operator to
// accept. A later drift replaces the hold's values (the latest boot is
// what an accept adopts).
func (s *Store) HoldFirmware(ctx context.Context, nodeID string, h MeasurementHold) error {
	if h.RunID == "" {
		return fmt.Errorf("store: hold firmware measurements of node %s: no run named", nodeID)
	}
	pcrs, err := json.Marshal(h.PCRs)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE firmware_pcrs SET hold_run = ?, hold_detail = ?, hold_at = ?, hold_pcrs = ?, hold_firmware = ? WHERE node_id = ?`,
			h.RunID, h.Detail, toMs(h.At), string(pcrs), h.Firmware, nodeID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("no firmware record to hold (%d rows, %v)", n, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: hold firmware measurements of node %s: %w", nodeID, err)
	}
	return nil
}

// AcceptMeasurements adopts a held node's drifted values as its record
// (an operator's decision that the change is legitimate) and clears the
// hold. It returns the record as it was, hold included; ErrNotHeld if the
// node has no hold.
func (s *Store) AcceptMeasurements(ctx context.Context, nodeID string, now time.Time) (FirmwareRecord, error) {
	before, err := s.GetFirmwareRecord(ctx, nodeID)
	if errors.Is(err, ErrNotFound) || err == nil && !before.Held() {
		return before, fmt.Errorf("store: accept measurements of node %s: %w", nodeID, ErrNotHeld)
	}
	if err != nil {
		return before, err
	}
	var accepted bool
	err = s.tx(ctx, func(tx *Tx) error {
		// Compare-and-set on the hold read: a newer drift since (other
		// values) is not accepted unseen.
		res, err := tx.ExecContext(ctx, `UPDATE firmware_pcrs SET pcrs = hold_pcrs, firmware = hold_firmware, run_id = hold_run, recorded_at = ?,
	hold_run = '', hold_detail = '', hold_at = 0, hold_pcrs = '{}', hold_firmware = ''
WHERE node_id = ? AND hold_run = ? AND hold_at = ?`, toMs(now), nodeID, before.Hold.RunID, toMs(before.Hold.At))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		accepted = n == 1
		return err
	})
	if err != nil {
		return before, fmt.Errorf("store: accept measurements of node %s: %w", nodeID, err)
	}
	if !accepted {
		return before, fmt.Errorf("store: accept measurements of node %s: the hold changed while it was being accepted (a new drift): read it again", nodeID)
	}
	return before, nil
}

// SKUPCRs are what a SKU's firmware version is known to produce: PCR index
// -> hex, PCR 4 for the image asked for. Each value is the first a vetted
// boot of a node of the SKU showed (a node's own recorded boot: its first,
// one an admin accepted, or one that matched its record), never a drifted
// one. ErrNotFound: none known for the SKU and firmware.
func (s *Store) SKUPCRs(ctx context.Context, sku, firmware, image string) (map[string]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT pcr, image, value FROM sku_pcrs WHERE sku = ? AND firmware = ? AND (image = '' OR image = ?)`, sku, firmware, image)
	if err != nil {
		return nil, fmt.Errorf("store: measurements of SKU %s firmware %q: %w", sku, firmware, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var pcr int
		var img, v string
		if err := rows.Scan(&pcr, &img, &v); err != nil {
			return nil, fmt.Errorf("store: measurements of SKU %s firmware %q: %w", sku, firmware, err)
		}
		out[fmt.Sprint(pcr)] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: measurements of SKU %s firmware %q: %w", sku, firmware, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("store: measurements of SKU %s firmware %q: %w", sku, firmware, ErrNotFound)
	}
	return out, nil
}

// KnownPCRs is a vetted boot's values offered as what its SKU's firmware
// produces (AddSKUPCRs).
type KnownPCRs struct {
	SKU, Firmware, Image string // Image applies to PCR 4 only
	PCRs                 map[string]string
	NodeID, RunID        string
	At                   time.Time
}

// AddSKUPCRs keeps each value for which the SKU and firmware (and, for PCR
// 4, the image) have none yet: the first node to show a value sets it, a
// later one never replaces it (two racing boots: the first write wins).
func (s *Store) AddSKUPCRs(ctx context.Context, k KnownPCRs) error {
	if k.SKU == "" {
		return nil // a node of no SKU has no fleet to be compared with
	}
	err := s.tx(ctx, func(tx *Tx) error {
		for p, v := range k.PCRs {
			pcr, err := strconv.Atoi(p)
			if err != nil {
				return fmt.Errorf("PCR %q", p)
			}
			img := ""
			if pcr == 4 {
				img = k.Image
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO sku_pcrs (sku, firmware, pcr, image, value, node_id, run_id, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(sku, firmware, pcr, image) DO NOTHING`, k.SKU, k.Firmware, pcr, img, v, k.NodeID, k.RunID, toMs(k.At)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: known measurements of SKU %s firmware %q: %w", k.SKU, k.Firmware, err)
	}
	return nil
}
