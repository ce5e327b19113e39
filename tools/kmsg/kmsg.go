// Package kmsg reads the kernel log as /dev/kmsg serves it: one record
// per read, "prio,seq,usec,flags;message" followed by dictionary lines
// (" SUBSYSTEM=pci", " DEVICE=+pci:0000:01:00.0") that say which device a
// driver's message is about. The runner attaches the lines of a failing
// component to its verdict and reads machine checks from them.
package kmsg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Record is one kernel log record.
type Record struct {
	Seq      uint64
	Priority int // syslog severity, 0 (emerg) to 7 (debug)
	Facility int // 0: the kernel
	Uptime   time.Duration
	Message  string // one line; continuation records stay separate
	// Subsystem and Device are the record's dictionary (dev_printk):
	// "pci" and "+pci:0000:01:00.0", "nvme" and "c242:0", "net" and "n2".
	Subsystem, Device string
}

// Line is the record as dmesg prints it: "[    6.798595] mce: ...".
func (r Record) Line() string {
	us := r.Uptime.Microseconds()
	return fmt.Sprintf("[%5d.%06d] %s", us/1e6, us%1e6, r.Message)
}

// maxUptime bounds a record's timestamp: anything later is not a record.
const maxUptime = 10 * 365 * 24 * time.Hour

// maxMessage bounds one message; the kernel's own limit is about 1 KiB.
const maxMessage = 4096

// Parse reads records in /dev/kmsg's format. Lines that are neither a
// record nor a dictionary line of the record before are skipped: the log
// is the kernel's, and a malformed line must not hide the ones after it.
func Parse(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 8192), 64*1024)
	last := -1 // index in out of the record dictionary lines belong to
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) > 0 && line[0] == ' ' {
			if last < 0 {
				continue
			}
			k, v, ok := bytes.Cut(line[1:], []byte{'='})
			if !ok {
				continue
			}
			switch string(k) {
			case "SUBSYSTEM":
				out[last].Subsystem = clean(v, 64)
			case "DEVICE":
				out[last].Device = clean(v, 128)
			}
			continue
		}
		rec, ok := parseRecord(line)
		if !ok {
			last = -1
			continue
		}
		out = append(out, rec)
		last = len(out) - 1
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading kernel log: %w", err)
	}
	return out, nil
}

func parseRecord(line []byte) (Record, bool) {
	head, msg, ok := bytes.Cut(line, []byte{';'})
	if !ok {
		return Record{}, false
	}
	f := bytes.SplitN(head, []byte{','}, 5)
	if len(f) < 3 {
		return Record{}, false
	}
	prio, err := strconv.ParseUint(string(f[0]), 10, 32)
	if err != nil {
		return Record{}, false
	}
	seq, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return Record{}, false
	}
	us, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil || us < 0 || us > int64(maxUptime/time.Microsecond) {
		return Record{}, false
	}
	return Record{Seq: seq, Priority: int(prio & 7), Facility: int(prio >> 3), Uptime: time.Duration(us) * time.Microsecond,
		Message: clean(msg, maxMessage)}, true
}

// clean bounds a field and makes it valid UTF-8 (it goes into protobuf
// strings); the kernel escapes control characters itself.
func clean(b []byte, max int) string {
	if len(b) > max {
		b = b[:max]
	}
	return strings.ToValidUTF8(strings.TrimRight(string(b), " "), "\uFFFD")
}

// Read returns what the kernel log at path (/dev/kmsg) holds now, from the
// oldest record still in the ring buffer, without waiting for more.
func Read(path string) ([]Record, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return Parse(r)
}

// Open returns the kernel log at path (/dev/kmsg) as a stream of record
// lines that ends (io.EOF) at the newest record instead of waiting for more.
func Open(path string) (io.ReadCloser, error) {
	// Raw syscalls: an *os.File would park on EAGAIN in Go's poller and
	// wait for the next kernel message instead of returning.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening kernel log %s: %w", path, err)
	}
	return &reader{fd: fd}, nil
}

// reader turns /dev/kmsg's one-record-per-read interface into a stream of
// lines; EAGAIN (no more records) is the end, EPIPE (records overwritten
// before being read) skips to the next one.
type reader struct {
	fd  int
	buf []byte
}

func (r *reader) Close() error { return unix.Close(r.fd) }

func (r *reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		rec := make([]byte, 8192) // a record is at most about 1 KiB plus its dictionary
		n, err := unix.Read(r.fd, rec)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return 0, io.EOF
		case errors.Is(err, unix.EPIPE), errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, err
		case n <= 0:
			return 0, io.EOF
		}
		// A /dev/kmsg read is one whole record ending in a newline; a
		// regular file (a test's root) is read in chunks.
		r.buf = rec[:n]
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Matching returns the last max records for which match is true, oldest
// first, and how many matched in all.
func Matching(recs []Record, max int, match func(Record) bool) ([]Record, int) {
	var out []Record
	n := 0
	for _, r := range recs {
		if match(r) {
			n++
			out = append(out, r)
			if len(out) > max {
				out = out[1:]
			}
		}
	}
	return out, n
}
