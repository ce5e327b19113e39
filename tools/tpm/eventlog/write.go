package eventlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
)

// Writer builds a crypto-agile log with a sha256 bank only, as firmware
// writes it: for tests that extend a real TPM (swtpm) with the same events,
// and for fixtures. Extend returns the digest to extend the PCR with.
type Writer struct {
	buf bytes.Buffer
}

// NewWriter starts a log with its Spec ID Event03 header.
func NewWriter() *Writer {
	w := &Writer{}
	var spec bytes.Buffer
	spec.Write(specIDSignature)
	le(&spec, uint32(0)) // platformClass: client
	spec.Write([]byte{0, 2, 0, 2})
	le(&spec, uint32(1))
	le(&spec, AlgSHA256)
	le(&spec, uint16(sha256.Size))
	spec.WriteByte(0) // vendorInfoSize
	le(&w.buf, uint32(0))
	le(&w.buf, EVNoAction)
	w.buf.Write(make([]byte, 20))
	le(&w.buf, uint32(spec.Len()))
	w.buf.Write(spec.Bytes())
	return w
}

// Event appends an event whose digest is sha256(data) and returns the digest.
func (w *Writer) Event(pcr, typ uint32, data []byte) []byte {
	d := sha256.Sum256(data)
	w.Digest(pcr, typ, d[:], data)
	return d[:]
}

// Digest appends an event with a given digest (an EV_EFI_BOOT_SERVICES_APPLICATION
// carries the image's Authenticode hash, not a hash of its data).
func (w *Writer) Digest(pcr, typ uint32, digest, data []byte) {
	le(&w.buf, pcr)
	le(&w.buf, typ)
	le(&w.buf, uint32(1))
	le(&w.buf, AlgSHA256)
	w.buf.Write(digest)
	le(&w.buf, uint32(len(data)))
	w.buf.Write(data)
}

// Bytes is the log so far.
func (w *Writer) Bytes() []byte { return bytes.Clone(w.buf.Bytes()) }

func le(b *bytes.Buffer, v any) { _ = binary.Write(b, binary.LittleEndian, v) }
