package nvme

import (
	"encoding/binary"
	"fmt"
)

// Log page identifiers (NVMe Base Specification 2.0, Figure 202).
const (
	LogErrorInfo    uint8 = 0x01
	LogSMARTHealth  uint8 = 0x02
	LogFirmwareSlot uint8 = 0x03
)

// NSIDAll addresses the controller as a whole (the SMART / Health log is
// controller-wide unless the controller supports per-namespace SMART).
const NSIDAll uint32 = 0xffffffff

// SMARTLogSize is the length of the SMART / Health Information log page.
const SMARTLogSize = 512

// GetLogPage issues Get Log Page (opcode 02h) for lid/nsid and fills buf,
// whose length must be a positive multiple of 4 (the command counts dwords).
// RAE (Retain Asynchronous Event) is set: a health check reads the log
// without clearing an asynchronous event the host driver may still report.
func GetLogPage(a Admin, lid uint8, nsid uint32, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 {
		return fmt.Errorf("get log page %#02x: buffer length %d is not a positive multiple of 4", lid, len(buf))
	}
	numd := uint32(len(buf)/4 - 1) // zero-based dword count, split NUMDL/NUMDU
	_, err := a.AdminCommand(&Command{
		Opcode:    OpGetLogPage,
		NSID:      nsid,
		CDW10:     uint32(lid) | 1<<15 | (numd&0xffff)<<16,
		CDW11:     numd >> 16,
		Data:      buf,
		TimeoutMs: defaultTimeoutMs,
	})
	if err != nil {
		return fmt.Errorf("get log page %#02x nsid %#x: %w", lid, nsid, err)
	}
	return nil
}

// Critical Warning bits (SMART / Health log byte 0, NVMe 2.0 Figure 207).
const (
	WarnSpareBelowThreshold = 1 << 0 // available spare below its threshold
	WarnTemperature         = 1 << 1 // temperature over/under a threshold
	WarnReliabilityDegraded = 1 << 2 // media or internal errors degrade reliability
	WarnReadOnly            = 1 << 3 // media placed in read-only mode
	WarnVolatileBackup      = 1 << 4 // volatile memory backup device failed
	WarnPMRReadOnly         = 1 << 5 // persistent memory region read-only or unreliable
)

var warningNames = []string{
	"spare below threshold", "temperature", "reliability degraded",
	"read-only", "volatile memory backup failed", "PMR read-only",
}

// SMARTLog is the decoded SMART / Health Information log page (LID 02h,
// NVMe 2.0 Figure 207). 128-bit counters saturate at the uint64 maximum,
// which no real device reaches.
type SMARTLog struct {
	CriticalWarning         uint8     // byte 0
	CompositeTempK          uint16    // bytes 2:1, kelvin
	AvailableSpare          uint8     // byte 3, percent
	AvailableSpareThreshold uint8     // byte 4, percent
	PercentageUsed          uint8     // byte 5, percent (may exceed 100)
	EnduranceGroupWarning   uint8     // byte 6
	DataUnitsRead           uint64    // bytes 47:32, units of 512,000 bytes
	DataUnitsWritten        uint64    // bytes 63:48
	HostReadCommands        uint64    // bytes 79:64
	HostWriteCommands       uint64    // bytes 95:80
	ControllerBusyMinutes   uint64    // bytes 111:96
	PowerCycles             uint64    // bytes 127:112
	PowerOnHours            uint64    // bytes 143:128
	UnsafeShutdowns         uint64    // bytes 159:144
	MediaErrors             uint64    // bytes 175:160, unrecovered data integrity errors
	ErrorLogEntries         uint64    // bytes 191:176
	WarningTempMinutes      uint32    // bytes 195:192
	CriticalTempMinutes     uint32    // bytes 199:196
	TempSensorsK            [8]uint16 // bytes 215:200, 0 when not implemented
}

// WarningNames lists the set Critical Warning bits by name.
func (l *SMARTLog) WarningNames() []string {
	var out []string
	for i, n := range warningNames {
		if l.CriticalWarning&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	if l.CriticalWarning&0xc0 != 0 {
		out = append(out, fmt.Sprintf("reserved bits %#02x", l.CriticalWarning&0xc0))
	}
	return out
}

// CompositeTempC is the composite temperature in degrees Celsius.
func (l *SMARTLog) CompositeTempC() int { return int(l.CompositeTempK) - 273 }

// ParseSMARTLog decodes a 512-byte SMART / Health Information log page.
func ParseSMARTLog(b []byte) (*SMARTLog, error) {
	if len(b) != SMARTLogSize {
		return nil, fmt.Errorf("smart/health log: expected %d bytes, got %d", SMARTLogSize, len(b))
	}
	le := binary.LittleEndian
	l := &SMARTLog{
		CriticalWarning:         b[0],
		CompositeTempK:          le.Uint16(b[1:]),
		AvailableSpare:          b[3],
		AvailableSpareThreshold: b[4],
		PercentageUsed:          b[5],
		EnduranceGroupWarning:   b[6],
		DataUnitsRead:           sat128(b[32:48]),
		DataUnitsWritten:        sat128(b[48:64]),
		HostReadCommands:        sat128(b[64:80]),
		HostWriteCommands:       sat128(b[80:96]),
		ControllerBusyMinutes:   sat128(b[96:112]),
		PowerCycles:             sat128(b[112:128]),
		PowerOnHours:            sat128(b[128:144]),
		UnsafeShutdowns:         sat128(b[144:160]),
		MediaErrors:             sat128(b[160:176]),
		ErrorLogEntries:         sat128(b[176:192]),
		WarningTempMinutes:      le.Uint32(b[192:]),
		CriticalTempMinutes:     le.Uint32(b[196:]),
	}
	for i := range l.TempSensorsK {
		l.TempSensorsK[i] = le.Uint16(b[200+2*i:])
	}
	return l, nil
}

// GetSMARTLog reads the controller-wide SMART / Health Information log.
func GetSMARTLog(a Admin) (*SMARTLog, error) {
	buf := make([]byte, SMARTLogSize)
	if err := GetLogPage(a, LogSMARTHealth, NSIDAll, buf); err != nil {
		return nil, fmt.Errorf("smart/health log: %w", err)
	}
	return ParseSMARTLog(buf)
}

// sat128 reads a little-endian 128-bit counter, saturating at 2^64-1.
func sat128(b []byte) uint64 {
	if binary.LittleEndian.Uint64(b[8:]) != 0 {
		return ^uint64(0)
	}
	return binary.LittleEndian.Uint64(b)
}
