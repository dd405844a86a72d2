package tui

import (
	"reflect"

	"oz0.ai/node/node/termtext"
)

// Everything the TUI shows from the node may hold text a plugin wrote (a reason, a
// server name, a log line, stderr): before it reaches the screen it is made inert
// here, so that no escape sequence, carriage return or bidirectional override from a
// plugin can move the cursor, recolour, retitle or rewrite what the operator reads.

// oneLine returns s as one line of inert text (node/termtext owns the rules: escape
// sequences whole, other controls, bidirectional overrides; line breaks become spaces).
func oneLine(s string) string {
	if isPlain(s) {
		return s
	}
	return termtext.Line(s)
}

// isPlain reports whether s is printable ASCII, the common case, left as it is.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// cleanAll applies oneLine to every string reachable from v (a pointer), map keys
// included, so that a field added to the status later is covered too.
func cleanAll(v any) {
	clean(reflect.ValueOf(v))
}

func clean(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			clean(v.Elem())
		}
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); !isPlain(s) {
				v.SetString(oneLine(s))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				clean(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			clean(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		iter := v.MapRange()
		for iter.Next() {
			k := reflect.New(v.Type().Key()).Elem()
			k.Set(iter.Key())
			clean(k)
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			clean(e)
			out.SetMapIndex(k, e)
		}
		if v.CanSet() {
			v.Set(out)
		}
	}
}
