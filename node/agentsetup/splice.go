package agentsetup

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"
)

// The edits below change a JSON document by splicing text: each touches only the
// bytes of the value it sets or takes out, and the separators around it, so that
// everything the user wrote keeps its bytes, order and layout. What is written is
// laid out like its neighbours (their indentation and colon style; compact in a
// compact document).

// at is a value of doc with its position: the result of lookup.
type at struct {
	gjson.Result
	ok bool
}

func (v at) end() int { return v.Index + len(v.Raw) }

// root is the document's top-level value.
func root(doc []byte) at {
	i := 0
	for i < len(doc) && isSpace(doc[i]) {
		i++
	}
	r := gjson.ParseBytes(doc[i:])
	r.Raw = strings.TrimRight(r.Raw, " \t\r\n")
	r.Index = i
	// Positions inside come from ForEach, relative to the parsed text.
	return at{r, true}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// member finds key in the object obj: its key and value (positions in doc).
func member(obj at, key string) (k, v at) {
	if !obj.ok || !obj.IsObject() {
		return at{}, at{}
	}
	obj.ForEach(func(kr, vr gjson.Result) bool {
		if kr.String() == key {
			k, v = at{kr, true}, at{vr, true}
			return false
		}
		return true
	})
	return k, v
}

// lookup walks keys from the root; ok is false when one is missing.
func lookup(doc []byte, keys ...string) at {
	cur := root(doc)
	for _, k := range keys {
		_, cur = member(cur, k)
		if !cur.ok {
			return at{}
		}
	}
	return cur
}

// elements lists an array's elements.
func elements(arr at) []at {
	var out []at
	arr.ForEach(func(_, v gjson.Result) bool {
		out = append(out, at{v, true})
		return true
	})
	return out
}

// members lists an object's keys and values.
func members(obj at) (keys, vals []at) {
	obj.ForEach(func(k, v gjson.Result) bool {
		keys, vals = append(keys, at{k, true}), append(vals, at{v, true})
		return true
	})
	return keys, vals
}

// indentAt is the whitespace that starts the line holding position i.
func indentAt(doc []byte, i int) string {
	s := bytes.LastIndexByte(doc[:i], '\n') + 1
	e := s
	for e < i && (doc[e] == ' ' || doc[e] == '\t') {
		e++
	}
	return string(doc[s:e])
}

// unit is one level of the document's indentation: the first member's, or two
// spaces.
func unit(doc []byte) string {
	r := root(doc)
	if keys, _ := members(r); len(keys) > 0 {
		if u := indentAt(doc, keys[0].Index); u != "" && bytes.ContainsRune(doc[r.Index:keys[0].Index], '\n') {
			return u
		}
	}
	return "  "
}

func compact(doc []byte) bool { return !bytes.ContainsRune(bytes.TrimSpace(doc), '\n') }

// render lays value out for a place indented by indent.
func render(doc []byte, value []byte, indent string) []byte {
	if compact(doc) && len(bytes.TrimSpace(doc)) > 2 {
		return pretty.Ugly(value)
	}
	p := bytes.TrimRight(pretty.PrettyOptions(value, &pretty.Options{Indent: unit(doc), SortKeys: false}), "\n")
	return bytes.ReplaceAll(p, []byte("\n"), []byte("\n"+indent))
}

func splice(doc []byte, from, to int, with []byte) []byte {
	out := make([]byte, 0, len(doc)-(to-from)+len(with))
	out = append(out, doc[:from]...)
	out = append(out, with...)
	return append(out, doc[to:]...)
}

// replace puts value in the place of v.
func replace(doc []byte, v at, value []byte) []byte {
	return splice(doc, v.Index, v.end(), render(doc, value, indentAt(doc, v.Index)))
}

// quoteKey is key as a JSON string.
func quoteKey(key string) []byte {
	b, _ := jsonMarshal(key)
	return b
}

// insert adds an entry (key and value for an object, value alone for an array)
// at the end of container c.
func insert(doc []byte, c at, key string, value []byte) []byte {
	isObj := c.IsObject()
	var firstStart, lastEnd, colonFrom, colonTo int
	n := 0
	if isObj {
		keys, vals := members(c)
		if n = len(keys); n > 0 {
			firstStart, lastEnd = keys[0].Index, vals[n-1].end()
			colonFrom, colonTo = keys[0].end(), vals[0].Index
		}
	} else if els := elements(c); len(els) > 0 {
		n = len(els)
		firstStart, lastEnd = els[0].Index, els[n-1].end()
	}
	entry := func(indent string) []byte {
		var b []byte
		if isObj {
			b = append(b, quoteKey(key)...)
			switch {
			case n > 0:
				b = append(b, doc[colonFrom:colonTo]...)
			case compact(doc) && len(bytes.TrimSpace(doc)) > 2:
				b = append(b, ':')
			default:
				b = append(b, ": "...)
			}
		}
		return append(b, render(doc, value, indent)...)
	}
	if n > 0 {
		sep := doc[c.Index+1 : firstStart] // what leads each entry in: newline and indent
		ins := append(append([]byte{','}, sep...), entry(indentAt(doc, firstStart))...)
		return splice(doc, lastEnd, lastEnd, ins)
	}
	// An empty container: its entry goes on a line of its own, one level in.
	closeAt := c.end() - 1
	if compact(doc) && len(bytes.TrimSpace(doc)) > 2 {
		return splice(doc, c.Index+1, closeAt, entry(""))
	}
	outer := indentAt(doc, c.Index)
	inner := outer + unit(doc)
	ins := append(append([]byte("\n"+inner), entry(inner)...), "\n"+outer...)
	return splice(doc, c.Index+1, closeAt, ins)
}

// removeEntry takes entry i out of container c, with the separator before it (or,
// for the first, after it); the last entry out leaves the container empty ({}
// or []).
func removeEntry(doc []byte, c at, i int) []byte {
	var starts, ends []int
	if c.IsObject() {
		keys, vals := members(c)
		for j := range keys {
			starts, ends = append(starts, keys[j].Index), append(ends, vals[j].end())
		}
	} else {
		for _, e := range elements(c) {
			starts, ends = append(starts, e.Index), append(ends, e.end())
		}
	}
	switch {
	case len(starts) == 1:
		return splice(doc, c.Index+1, c.end()-1, nil)
	case i > 0:
		return splice(doc, ends[i-1], ends[i], nil)
	default:
		return splice(doc, starts[0], starts[1], nil)
	}
}

// setMember sets obj[key] (the object at keys) to value, adding the member,
// and the objects on the way, where missing.
func setMember(doc []byte, value []byte, keys ...string) ([]byte, error) {
	parent := root(doc)
	for i, k := range keys {
		if !parent.IsObject() {
			return nil, fmt.Errorf("%q is not an object", strings.Join(keys[:i], "."))
		}
		_, v := member(parent, k)
		if i == len(keys)-1 {
			if v.ok {
				return replace(doc, v, value), nil
			}
			return insert(doc, parent, k, value), nil
		}
		if !v.ok {
			// The rest of the path is built as one value.
			nested := value
			for j := len(keys) - 1; j > i; j-- {
				nested = []byte(`{` + string(quoteKey(keys[j])) + `:` + string(nested) + `}`)
			}
			return insert(doc, parent, k, nested), nil
		}
		parent = v
	}
	return nil, fmt.Errorf("empty path")
}

// deleteMember takes obj[key] out of the object at keys, if it is there.
func deleteMember(doc []byte, keys ...string) []byte {
	parent := lookup(doc, keys[:len(keys)-1]...)
	if !parent.ok || !parent.IsObject() {
		return doc
	}
	pk, _ := members(parent)
	for i, k := range pk {
		if k.String() == keys[len(keys)-1] {
			return removeEntry(doc, parent, i)
		}
	}
	return doc
}
