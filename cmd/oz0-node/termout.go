package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"

	"oz0.ai/node/node/termtext"
)

// printf is fmt.Fprintf for lines that show plugin text: every string-like argument
// (strings, string types, Stringers, errors) is passed through termtext.Line, so a
// manifest field, reason or message can neither drive the terminal nor start a line
// of its own. The format is the node's own.
func printf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, format, lineArgs(args)...)
}

func lineArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			out[i] = a
		case error:
			out[i] = termtext.Line(v.Error())
		case fmt.Stringer:
			out[i] = termtext.Line(v.String())
		default:
			switch rv := reflect.ValueOf(a); {
			case rv.Kind() == reflect.String:
				out[i] = termtext.Line(rv.String())
			case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.String:
				ss := make([]string, rv.Len())
				for j := range ss {
					ss[j] = rv.Index(j).String()
				}
				out[i] = termtext.Lines(ss)
			default:
				out[i] = a
			}
		}
	}
	return out
}

// writeJSON prints v as indented JSON whose strings hold no raw terminal controls
// (encoding/json leaves C1 and bidi controls raw; they are escaped, values intact).
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termtext.EscapeJSON(b), '\n'))
	return err
}
