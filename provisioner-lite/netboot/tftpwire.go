package netboot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// TFTP packets (RFC 1350) and options (RFC 2347 OACK, 2348 blksize, 2349
// tsize): only what a read-only server needs to read and write.
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes of RFC 1350 a client reads in an ERROR.
const (
	tftpErrUndefined = 0
	tftpErrNotFound  = 1
	tftpErrAccess    = 2
	tftpErrIllegalOp = 4
)

const (
	// maxTFTPRequest is the largest request RFC 2347 allows.
	maxTFTPRequest = 512
	// defaultBlockSize is RFC 1350's, used when blksize is not negotiated.
	defaultBlockSize = 512
	// blksize bounds of RFC 2348.
	minBlockSize = 8
	maxBlockSize = 65464
)

var errMalformed = errors.New("malformed TFTP packet")

// tftpRequest is a read or write request as the client sent it.
type tftpRequest struct {
	write    bool
	filename string // raw bytes: looked up, never used as a path
	mode     string // lowercased
	blksize  int    // 0: not asked, or outside RFC 2348's range (ignored)
	tsize    bool   // the client asked for the transfer size
}

// parseTFTPRequest reads an RRQ or WRQ: opcode, filename NUL, mode NUL,
// then option NUL value NUL pairs. Options other than blksize and tsize are
// ignored, as RFC 2347 lets a server do.
func parseTFTPRequest(b []byte) (tftpRequest, error) {
	if len(b) < 4 || len(b) > maxTFTPRequest {
		return tftpRequest{}, fmt.Errorf("%w: request of %d bytes", errMalformed, len(b))
	}
	var r tftpRequest
	switch binary.BigEndian.Uint16(b) {
	case opRRQ:
	case opWRQ:
		r.write = true
	default:
		return tftpRequest{}, fmt.Errorf("%w: opcode %d is not a request", errMalformed, binary.BigEndian.Uint16(b))
	}
	if b[len(b)-1] != 0 {
		return tftpRequest{}, fmt.Errorf("%w: request does not end with NUL", errMalformed)
	}
	fields := bytes.Split(b[2:len(b)-1], []byte{0})
	if len(fields) < 2 || len(fields)%2 != 0 {
		return tftpRequest{}, fmt.Errorf("%w: %d fields, want filename, mode and option pairs", errMalformed, len(fields))
	}
	r.filename = string(fields[0])
	r.mode = strings.ToLower(string(fields[1]))
	if r.mode == "" {
		return tftpRequest{}, fmt.Errorf("%w: empty mode", errMalformed)
	}
	seen := map[string]bool{}
	for i := 2; i < len(fields); i += 2 {
		name, value := strings.ToLower(string(fields[i])), string(fields[i+1])
		if seen[name] { // the first of a repeated option counts
			continue
		}
		seen[name] = true
		switch name {
		case "blksize":
			if n, err := strconv.Atoi(value); err == nil && n >= minBlockSize && n <= maxBlockSize {
				r.blksize = n
			}
		case "tsize":
			r.tsize = true
		}
	}
	return r, nil
}

// tftpClientPacket is what a reading client sends on a transfer: an ACK
// of a block, or an ERROR that ends the transfer.
type tftpClientPacket struct {
	op    uint16 // opACK or opERROR
	block uint16 // ACK: the block acknowledged
	code  uint16 // ERROR: the error code
}

// parseTFTPClientPacket reads an ACK or an ERROR; anything else a reading
// client has no reason to send.
func parseTFTPClientPacket(b []byte) (tftpClientPacket, error) {
	if len(b) < 4 {
		return tftpClientPacket{}, fmt.Errorf("%w: %d bytes", errMalformed, len(b))
	}
	p := tftpClientPacket{op: binary.BigEndian.Uint16(b)}
	switch p.op {
	case opACK:
		p.block = binary.BigEndian.Uint16(b[2:])
	case opERROR:
		p.code = binary.BigEndian.Uint16(b[2:])
	default:
		return tftpClientPacket{}, fmt.Errorf("%w: opcode %d on a read transfer", errMalformed, p.op)
	}
	return p, nil
}

// tftpPlan is how a read request is answered: the block size, and the OACK
// that comes first when the server accepted an option (else DATA 1 does).
type tftpPlan struct {
	blksize int
	oack    []byte
}

// planTFTPRead accepts blksize (capped at maxBlk) and tsize (the file's
// size) when asked.
func planTFTPRead(r tftpRequest, size, maxBlk int) tftpPlan {
	p := tftpPlan{blksize: defaultBlockSize}
	var opts []string
	if r.blksize > 0 {
		p.blksize = min(r.blksize, maxBlk)
		opts = append(opts, "blksize", strconv.Itoa(p.blksize))
	}
	if r.tsize {
		opts = append(opts, "tsize", strconv.Itoa(size))
	}
	if len(opts) > 0 {
		p.oack = binary.BigEndian.AppendUint16(nil, opOACK)
		for _, o := range opts {
			p.oack = append(append(p.oack, o...), 0)
		}
	}
	return p
}

// tftpBlocks is the number of DATA blocks of a file: the last one is
// shorter than blksize, empty when the size is a multiple of it.
func tftpBlocks(size, blksize int) int { return size/blksize + 1 }

// tftpData is DATA block n (1-based; the wire number wraps at 65536, as
// clients that read large files with small blocks expect) of data.
func tftpData(buf []byte, data []byte, n, blksize int) []byte {
	off := min((n-1)*blksize, len(data))
	end := min(off+blksize, len(data))
	buf = binary.BigEndian.AppendUint16(buf[:0], opDATA)
	buf = binary.BigEndian.AppendUint16(buf, uint16(n))
	return append(buf, data[off:end]...)
}

// tftpError is an ERROR packet.
func tftpError(code uint16, msg string) []byte {
	b := binary.BigEndian.AppendUint16(nil, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)
	return append(append(b, msg...), 0)
}
