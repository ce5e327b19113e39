package transport

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// validUTF8 replaces invalid UTF-8 in every string of m, in place. proto3
// refuses to marshal a string field that is not UTF-8, and hardware and tool
// output (a drive serial with a 0xff byte) can be anything: one bad byte
// must cost a U+FFFD, not the session (the event would be re-sent forever).
func validUTF8(m proto.Message) {
	if m != nil {
		fixMessage(m.ProtoReflect())
	}
}

func fix(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func fixMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(fix(l.Get(i).String())))
				} else if fd.Message() != nil {
					fixMessage(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type kv struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var all []kv
			mp.Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.StringKind {
					val = protoreflect.ValueOfString(fix(val.String()))
				} else if fd.MapValue().Message() != nil {
					fixMessage(val.Message())
				}
				all = append(all, kv{k, val})
				return true
			})
			for _, e := range all {
				mp.Clear(e.k)
				k := e.k
				if fd.MapKey().Kind() == protoreflect.StringKind {
					k = protoreflect.ValueOfString(fix(e.k.String())).MapKey()
				}
				mp.Set(k, e.v)
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); !utf8.ValidString(s) {
				m.Set(fd, protoreflect.ValueOfString(fix(s)))
			}
		case fd.Message() != nil:
			fixMessage(v.Message())
		}
		return true
	})
}
