package harness

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A protobuf string must be valid UTF-8, or the record cannot be encoded:
// stored, or sent to another node. An episode's text is not always valid:
// a model may stop between the bytes of one character, a tool may print
// bytes of another encoding, a repository may hold Latin-1 source. The
// token ids keep what was really seen; the text keeps the bytes it can
// and shows U+FFFD for the others.

// ValidString replaces each run of invalid UTF-8 in s with U+FFFD.
func ValidString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// ValidUTF8 makes every string field of m, nested messages, lists and maps
// included, valid UTF-8 in place.
func ValidUTF8(m proto.Message) {
	if m == nil {
		return
	}
	validMessage(m.ProtoReflect())
}

func validMessage(m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				switch fd.Kind() {
				case protoreflect.StringKind:
					if s := l.Get(i).String(); !utf8.ValidString(s) {
						l.Set(i, protoreflect.ValueOfString(ValidString(s)))
					}
				case protoreflect.MessageKind, protoreflect.GroupKind:
					validMessage(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type entry struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var set, rekey []entry
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				switch fd.MapValue().Kind() {
				case protoreflect.StringKind:
					if s := mv.String(); !utf8.ValidString(s) {
						mv = protoreflect.ValueOfString(ValidString(s))
						set = append(set, entry{k, mv})
					}
				case protoreflect.MessageKind, protoreflect.GroupKind:
					validMessage(mv.Message())
				}
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
					rekey = append(rekey, entry{k, mv})
				}
				return true
			})
			for _, e := range set {
				mp.Set(e.k, e.v)
			}
			for _, e := range rekey {
				mp.Clear(e.k)
				// A cleaned key that is already there keeps its value.
				if k := protoreflect.ValueOfString(ValidString(e.k.String())).MapKey(); !mp.Has(k) {
					mp.Set(k, e.v)
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); !utf8.ValidString(s) {
				m.Set(fd, protoreflect.ValueOfString(ValidString(s)))
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			validMessage(v.Message())
		}
		return true
	})
}
