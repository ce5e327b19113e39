package transport

import (
	"strings"
	"unicode/utf8"

	"github.com/cure-oss/cure/api/protowalk"
	"google.golang.org/protobuf/proto"
)

// validUTF8 replaces invalid UTF-8 in every string of m, in place. proto3
// refuses to marshal a string field that is not UTF-8, and hardware and tool
// output (a drive serial with a 0xff byte) can be anything: one bad byte
// must cost a U+FFFD, not the session (the event would be re-sent forever).
func validUTF8(m proto.Message) { protowalk.Strings(m, fixUTF8) }

func fixUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
