// Package protowalk rewrites every string of a protobuf message in place:
// values, list elements, map keys and values, in nested messages too. Both
// ends of the contract use it on bytes they do not trust: the runner makes
// hardware strings valid UTF-8 before proto3 would refuse them, curectl
// strips control characters from what runners wrote before a terminal shows
// it. Walking by reflection covers fields added to the contract later.
package protowalk

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Strings replaces each string s of m by f(s).
func Strings(m proto.Message, f func(string) string) {
	if m != nil {
		walk(m.ProtoReflect(), f)
	}
}

func walk(m protoreflect.Message, f func(string) string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString(f(l.Get(i).String())))
				} else if fd.Message() != nil {
					walk(l.Get(i).Message(), f)
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type entry struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var all []entry
			mp.Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.StringKind {
					val = protoreflect.ValueOfString(f(val.String()))
				} else if fd.MapValue().Message() != nil {
					walk(val.Message(), f)
				}
				all = append(all, entry{k, val})
				return true
			})
			for _, e := range all { // keys change too: re-insert every entry
				mp.Clear(e.k)
			}
			for _, e := range all {
				k := e.k
				if fd.MapKey().Kind() == protoreflect.StringKind {
					k = protoreflect.ValueOfString(f(e.k.String())).MapKey()
				}
				mp.Set(k, e.v)
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); f(s) != s {
				m.Set(fd, protoreflect.ValueOfString(f(s)))
			}
		case fd.Message() != nil:
			walk(v.Message(), f)
		}
		return true
	})
}
