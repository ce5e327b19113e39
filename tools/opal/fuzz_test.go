package opal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/ata"
)

// FuzzParseDiscovery feeds Level 0 Discovery responses as a drive could
// return them. An accepted response must have walked exactly its declared
// length: padding after it changes nothing, and cutting it short is an
// error.
func FuzzParseDiscovery(f *testing.F) {
	f.Add(opal2Locked)
	padded := make([]byte, DiscoveryBufferSize)
	copy(padded, opal2Locked)
	f.Add(padded)
	f.Add(level0(
		desc(FeatureTPer, 1, append([]byte{0x01}, make([]byte, 11)...)...),
		desc(FeatureLocking, 2, append([]byte{0x0B}, make([]byte, 11)...)...),
		desc(0x0504, 1, 1, 2, 3),
		desc(FeatureRuby, 1, 0x08, 0x00, 0x00, 0x02, 1, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0),
	))
	f.Add(level0(
		desc(FeatureTPer, 1, 1),
		desc(FeaturePyriteV2, 1, 0x00, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0, 0xFF, 0x00, 0, 0, 0, 0, 0),
		desc(FeatureDataRemoval, 1, append([]byte{0, 0, RemovalOverwrite | RemovalBlockErase}, make([]byte, 29)...)...),
		desc(FeatureBlockSID, 1, 3, 1),
		desc(FeatureEnterprise, 1, 0, 1, 0, 1, 1),
	))
	f.Add(level0(desc(FeatureTPer, 1, 1), desc(FeatureOpalV2, 1, 0, 1)))
	f.Add(make([]byte, 48))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDiscovery(b)
		if err != nil {
			// "Not a TCG drive" is an answer the wipe acts on: only an
			// empty response or one without a TPer descriptor means it.
			if errors.Is(err, ErrNoTCG) && len(b) >= headerSize && binary.BigEndian.Uint32(b) != 0 && !strings.Contains(err.Error(), "no TPer") {
				t.Fatalf("ErrNoTCG for a response with a length: %v", err)
			}
			return
		}
		total := int(binary.BigEndian.Uint32(b)) + 4
		if total < headerSize || total > len(b) {
			t.Fatalf("accepted %d bytes whose header says %d", len(b), total)
		}
		if d.TPer == nil || !slices.Contains(d.Features, FeatureTPer) {
			t.Fatalf("accepted without a TPer descriptor: %+v", d)
		}
		// Each descriptor takes at least its 4-byte header.
		if len(d.Features) > (total-headerSize)/descriptorHeaderLen || len(d.SSCs) > len(d.Features) {
			t.Fatalf("%d features, %d SSCs in %d bytes", len(d.Features), len(d.SSCs), total)
		}
		for _, s := range d.SSCs {
			if !slices.Contains(d.Features, s.Code) || s.Name == "" {
				t.Fatalf("SSC %+v not among features %v", s, d.Features)
			}
		}
		if s := d.PrimarySSC(); s != nil && !slices.ContainsFunc(d.SSCs, func(x SSC) bool { return x == *s }) {
			t.Fatalf("primary SSC %+v is not one of %+v", s, d.SSCs)
		}
		if _, why := d.FactoryState(); why == "" || d.Summary() == "" || d.SSCName() == "" {
			t.Fatal("empty report")
		}
		_ = d.SupportsRevert() || d.CryptoErasesOnRevert()

		more := append(bytes.Clone(b), 0xde, 0xad, 0xbe, 0xef)
		if d2, err := ParseDiscovery(more); err != nil || !reflect.DeepEqual(d, d2) {
			t.Fatalf("bytes after the declared length changed the result: %v", err)
		}
		if _, err := ParseDiscovery(b[:total-1]); err == nil {
			t.Fatalf("accepted a response cut one byte short of its %d-byte length", total)
		}
	})
}

// FuzzParseSense decodes sense data as SG_IO returns it. The opal and ata
// packages each decode key/ASC/ASCQ (opal needs no ATA registers); both
// must agree, and the error built from them must not panic.
func FuzzParseSense(f *testing.F) {
	fixed := make([]byte, 18)
	fixed[0], fixed[2], fixed[12] = 0x70, 0x05, 0x20
	f.Add(fixed, uint8(2), uint16(0), uint16(0x08))
	f.Add([]byte{0x72, 0x02, 0x04, 0x01}, uint8(2), uint16(0), uint16(0))
	f.Add([]byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 14, 0x09, 0x0c, 0, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x51}, uint8(2), uint16(0), uint16(0x08))
	f.Add([]byte{0xf0, 0, 0x0b, 0, 0x51}, uint8(2), uint16(0x03), uint16(0))
	f.Add([]byte{}, uint8(0), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, sense []byte, status uint8, host, driver uint16) {
		key, asc, ascq := parseSense(sense)
		if key > 0xf {
			t.Fatalf("sense key %#x", key)
		}
		a := ata.ParseSense(sense)
		if a.Key != key || a.ASC != asc || a.ASCQ != ascq {
			t.Fatalf("% x: opal %x/%02x/%02x, ata %x/%02x/%02x", sense, key, asc, ascq, a.Key, a.ASC, a.ASCQ)
		}
		r := &SCSIResult{Status: status, HostStatus: host, DriverStatus: driver, Sense: sense}
		err := r.Err()
		if good := status == 0 && host == 0 && driver&^driverSense == 0; good != (err == nil) {
			t.Fatalf("status %#x host %#x driver %#x: err = %v", status, host, driver, err)
		}
		if err == nil {
			return
		}
		var se *SenseError
		if !errors.As(err, &se) || se.Key != key || se.ASC != asc || err.Error() == "" {
			t.Fatalf("err = %v", err)
		}
		if errors.Is(err, ErrNoTCG) != se.Unsupported() {
			t.Fatalf("ErrNoTCG %t but Unsupported %t", errors.Is(err, ErrNoTCG), se.Unsupported())
		}
	})
}
