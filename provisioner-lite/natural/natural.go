// Package natural orders component names the way slots are numbered on a
// chassis: runs of digits compare by value, so gpu/2 sorts before gpu/10
// and nvme0n1 before nvme10n1.
package natural

import "strings"

// Compare returns -1, 0 or +1. Strings are split into digit and non-digit
// chunks compared pairwise; equal numbers spelt differently ("01" and "1")
// fall back to byte order, so the order stays total.
func Compare(a, b string) int {
	for a != "" && b != "" {
		ca, ra := chunk(a)
		cb, rb := chunk(b)
		if isDigit(ca[0]) && isDigit(cb[0]) {
			ta, tb := strings.TrimLeft(ca, "0"), strings.TrimLeft(cb, "0")
			if len(ta) != len(tb) {
				return sign(len(ta) - len(tb))
			}
			if c := strings.Compare(ta, tb); c != 0 {
				return c
			}
		}
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		a, b = ra, rb
	}
	return sign(len(a) - len(b))
}

// chunk splits off s's leading run of digits or of non-digits.
func chunk(s string) (run, rest string) {
	d := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == d {
		i++
	}
	return s[:i], s[i:]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
