package manifests

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes, written in manifests as a plain integer or a
// human string: B, KB/MB/GB/TB/PB (powers of 10) or KiB/MiB/GiB/TiB/PiB
// (powers of 2). Decimal mantissas are allowed when the result is a whole
// number of bytes ("1.92TB" is a real NVMe capacity).
type ByteSize int64

// decimalRE keeps big.Rat from accepting "0x10", "1e3" or "1/2".
var decimalRE = lazyRegexp(`^[0-9]+(\.[0-9]+)?$`)

var byteUnits = []struct {
	name string
	mult int64
}{
	// Longest first so "KiB" is not read as "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15},
	{"b", 1},
}

// ParseByteSize parses "512", "1GiB", "1.92TB", "4 KiB". Units are
// case-insensitive; the result must be a positive whole number of bytes.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	num, mult := t, int64(1)
	lower := strings.ToLower(t)
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.name) {
			num, mult = strings.TrimSpace(t[:len(t)-len(u.name)]), u.mult
			break
		}
	}
	if !decimalRE.MatchString(num) {
		return 0, fmt.Errorf("%q is not a size (want e.g. 512, 1GiB, 1.92TB)", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%q is not a size (want e.g. 512, 1GiB, 1.92TB)", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	n := r.Num()
	if !n.IsInt64() || n.Int64() > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if n.Sign() <= 0 {
		return 0, fmt.Errorf("%q must be greater than zero", s)
	}
	return ByteSize(n.Int64()), nil
}

// String formats b in whichever unit family (binary or decimal) divides it
// exactly with the smaller number — "1GiB", "2TB" — else in bytes;
// ParseByteSize reads it back exactly.
func (b ByteSize) String() string {
	n := int64(b)
	best, unit := n, "B"
	if n > 0 {
		for _, u := range [][2]any{
			{int64(1 << 50), "PiB"}, {int64(1 << 40), "TiB"}, {int64(1 << 30), "GiB"}, {int64(1 << 20), "MiB"}, {int64(1 << 10), "KiB"},
			{int64(1e15), "PB"}, {int64(1e12), "TB"}, {int64(1e9), "GB"}, {int64(1e6), "MB"}, {int64(1e3), "KB"},
		} {
			m := u[0].(int64)
			if n%m == 0 && n/m < best {
				best, unit = n/m, u[1].(string)
			}
		}
	}
	return strconv.FormatInt(best, 10) + unit
}

// MarshalYAML writes b as a human string.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }
