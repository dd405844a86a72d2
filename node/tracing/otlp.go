package tracing

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP messages are written by hand with protowire rather than with the
// generated go.opentelemetry.io/proto/otlp types: those import gRPC, whose
// package initialisers cost every node megabytes even with tracing off. The
// field numbers are those of opentelemetry-proto's trace.proto, common.proto,
// resource.proto and trace_service.proto.

// Span flags (trace.proto's SpanFlags): the low byte holds the W3C trace
// flags; these two say whether the parent (of a span) or the linked span
// context (of a link) is known to be remote, and whether it is.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// encodeRequest is an ExportTraceServiceRequest of the spans, grouped into a
// ResourceSpans per resource and a ScopeSpans per instrumentation scope, in the
// order they first appear.
func encodeRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		name, version, schema string
		attrs                 attribute.Distinct
	}
	type scopeGroup struct {
		scope instrumentation.Scope
		spans []sdktrace.ReadOnlySpan
	}
	type resGroup struct {
		res    *resource.Resource
		scopes []*scopeGroup
		byKey  map[scopeKey]*scopeGroup
	}
	type resKey struct {
		attrs  attribute.Distinct
		schema string
	}
	var groups []*resGroup
	byRes := map[resKey]*resGroup{}
	for _, s := range spans {
		res := s.Resource()
		rk := resKey{res.Equivalent(), res.SchemaURL()}
		rg := byRes[rk]
		if rg == nil {
			rg = &resGroup{res: res, byKey: map[scopeKey]*scopeGroup{}}
			byRes[rk] = rg
			groups = append(groups, rg)
		}
		sc := s.InstrumentationScope()
		sk := scopeKey{sc.Name, sc.Version, sc.SchemaURL, sc.Attributes.Equivalent()}
		sg := rg.byKey[sk]
		if sg == nil {
			sg = &scopeGroup{scope: sc}
			rg.byKey[sk] = sg
			rg.scopes = append(rg.scopes, sg)
		}
		sg.spans = append(sg.spans, s)
	}

	var b []byte
	for _, rg := range groups {
		// ExportTraceServiceRequest.resource_spans = 1
		b = appendMessage(b, 1, func(b []byte) []byte {
			// ResourceSpans.resource = 1
			b = appendMessage(b, 1, func(b []byte) []byte {
				for _, kv := range rg.res.Attributes() {
					b = appendMessage(b, 1, func(b []byte) []byte { return appendKeyValue(b, kv) }) // Resource.attributes = 1
				}
				return b
			})
			for _, sg := range rg.scopes {
				// ResourceSpans.scope_spans = 2
				b = appendMessage(b, 2, func(b []byte) []byte {
					// ScopeSpans.scope = 1
					b = appendMessage(b, 1, func(b []byte) []byte {
						b = appendString(b, 1, sg.scope.Name)    // InstrumentationScope.name
						b = appendString(b, 2, sg.scope.Version) // InstrumentationScope.version
						b = appendAttributes(b, 3, sg.scope.Attributes.ToSlice())
						return b
					})
					for _, s := range sg.spans {
						b = appendMessage(b, 2, func(b []byte) []byte { return appendSpan(b, s) }) // ScopeSpans.spans = 2
					}
					return appendString(b, 3, sg.scope.SchemaURL) // ScopeSpans.schema_url
				})
			}
			return appendString(b, 3, rg.res.SchemaURL()) // ResourceSpans.schema_url
		})
	}
	return b
}

// appendSpan writes a Span's fields.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	b = appendString(b, 3, sc.TraceState().String())
	if p := s.Parent(); p.SpanID().IsValid() {
		psid := p.SpanID()
		b = appendBytes(b, 4, psid[:])
	}
	b = appendString(b, 5, s.Name())
	// trace.SpanKind's values are SpanKind's of trace.proto (1 internal …
	// 5 consumer).
	if k := s.SpanKind(); k != trace.SpanKindUnspecified {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(k))
	}
	b = appendTime(b, 7, s.StartTime())
	b = appendTime(b, 8, s.EndTime())
	b = appendAttributes(b, 9, s.Attributes())
	b = appendCount(b, 10, s.DroppedAttributes())
	for _, ev := range s.Events() {
		b = appendMessage(b, 11, func(b []byte) []byte {
			b = appendTime(b, 1, ev.Time)
			b = appendString(b, 2, ev.Name)
			b = appendAttributes(b, 3, ev.Attributes)
			return appendCount(b, 4, ev.DroppedAttributeCount)
		})
	}
	b = appendCount(b, 12, s.DroppedEvents())
	for _, l := range s.Links() {
		b = appendMessage(b, 13, func(b []byte) []byte {
			tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, 1, tid[:])
			b = appendBytes(b, 2, sid[:])
			b = appendString(b, 3, l.SpanContext.TraceState().String())
			b = appendAttributes(b, 4, l.Attributes)
			b = appendCount(b, 5, l.DroppedAttributeCount)
			return appendFlags(b, 6, l.SpanContext)
		})
	}
	b = appendCount(b, 14, s.DroppedLinks())
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		b = appendMessage(b, 15, func(b []byte) []byte {
			b = appendString(b, 2, st.Description) // Status.message
			// Status.code: 1 ok, 2 error (codes.Code numbers them the other way).
			var code uint64
			switch st.Code {
			case codes.Ok:
				code = 1
			case codes.Error:
				code = 2
			}
			if code != 0 {
				b = protowire.AppendTag(b, 3, protowire.VarintType)
				b = protowire.AppendVarint(b, code)
			}
			return b
		})
	}
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	flags := uint32(sc.TraceFlags()) | flagHasIsRemote
	if s.Parent().IsRemote() {
		flags |= flagIsRemote
	}
	return protowire.AppendFixed32(b, flags)
}

// appendFlags writes a Link's flags: the linked context's trace flags and
// whether it is remote.
func appendFlags(b []byte, num protowire.Number, sc trace.SpanContext) []byte {
	flags := uint32(sc.TraceFlags()) | flagHasIsRemote
	if sc.IsRemote() {
		flags |= flagIsRemote
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}

// appendAttributes writes each attribute as a repeated KeyValue field.
func appendAttributes(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMessage(b, num, func(b []byte) []byte { return appendKeyValue(b, kv) })
	}
	return b
}

// appendKeyValue writes a KeyValue's fields: key = 1, value = 2.
func appendKeyValue(b []byte, kv attribute.KeyValue) []byte {
	b = appendString(b, 1, string(kv.Key))
	return appendMessage(b, 2, func(b []byte) []byte { return appendAnyValue(b, kv.Value) })
}

// appendAnyValue writes an AnyValue's one field. An empty value is an AnyValue
// with none, as OTLP has it.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	// A oneof member is written even when it holds its type's zero value:
	// its presence is the value's type.
	switch v.Type() {
	case attribute.STRING:
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	case attribute.BOOL:
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, 4, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		s := v.AsBoolSlice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.BoolValue(s[i])) })
	case attribute.INT64SLICE:
		s := v.AsInt64Slice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.Int64Value(s[i])) })
	case attribute.FLOAT64SLICE:
		s := v.AsFloat64Slice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.Float64Value(s[i])) })
	case attribute.STRINGSLICE:
		s := v.AsStringSlice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, attribute.StringValue(s[i])) })
	case attribute.SLICE:
		s := v.AsSlice()
		b = appendArray(b, len(s), func(b []byte, i int) []byte { return appendAnyValue(b, s[i]) })
	case attribute.MAP:
		// AnyValue.kvlist_value = 6: KeyValueList{repeated KeyValue values = 1}.
		b = appendMessage(b, 6, func(b []byte) []byte { return appendAttributes(b, 1, v.AsMap()) })
	}
	return b
}

// appendArray writes AnyValue.array_value = 5: ArrayValue{repeated AnyValue
// values = 1}, the i-th written by elem.
func appendArray(b []byte, n int, elem func(b []byte, i int) []byte) []byte {
	return appendMessage(b, 5, func(b []byte) []byte {
		for i := range n {
			b = appendMessage(b, 1, func(b []byte) []byte { return elem(b, i) })
		}
		return b
	})
}

// appendMessage writes a length-delimited field whose contents body appends.
// It needs no second buffer: it leaves one byte for the length, lets body
// write after it, then moves the contents along when their length takes more
// than one byte to say.
func appendMessage(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = append(b, 0)
	b = body(b)
	n := len(b) - at - 1
	if size := protowire.SizeVarint(uint64(n)); size > 1 {
		b = append(b, make([]byte, size-1)...)
		copy(b[at+size:], b[at+1:at+1+n])
	}
	protowire.AppendVarint(b[:at], uint64(n)) // in place: b has the room
	return b
}

// appendString writes a string field unless it is empty (proto3's default).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendCount writes a dropped_*_count field unless it is zero.
func appendCount[N int | uint32](b []byte, num protowire.Number, n N) []byte {
	if n <= 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(n))
}

// appendTime writes a *_time_unix_nano field (fixed64).
func appendTime(b []byte, num protowire.Number, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, uint64(t.UnixNano()))
}

// partialSuccess reads an ExportTraceServiceResponse: its partial_success = 1
// holds rejected_spans = 1 and error_message = 2, both zero when all the spans
// were taken.
func partialSuccess(msg []byte) (rejected int64, message string, err error) {
	err = eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		if num != 1 || typ != protowire.BytesType {
			return
		}
		if e := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
			switch {
			case num == 1 && typ == protowire.VarintType:
				rejected = int64(x)
			case num == 2 && typ == protowire.BytesType:
				message = string(v)
			}
		}); e != nil {
			err = e
		}
	})
	return rejected, message, err
}

// rpcStatus reads a google.rpc.Status (code = 1, message = 2, details = 3 of
// google.protobuf.Any{type_url = 1, value = 2}): its message, and the delay of
// a google.rpc.RetryInfo{retry_delay = 1 Duration{seconds = 1, nanos = 2}}
// among its details (0 if none). Collectors answer failures with one: in an
// OTLP/HTTP error's body, and in gRPC's grpc-status-details-bin trailer.
func rpcStatus(msg []byte) (message string, retryDelay time.Duration, err error) {
	err = eachField(msg, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		switch {
		case num == 2 && typ == protowire.BytesType:
			message = string(v)
		case num == 3 && typ == protowire.BytesType:
			var typeURL string
			var value []byte
			eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
				switch {
				case num == 1 && typ == protowire.BytesType:
					typeURL = string(v)
				case num == 2 && typ == protowire.BytesType:
					value = v
				}
			})
			if typeURL != "type.googleapis.com/google.rpc.RetryInfo" {
				return
			}
			eachField(value, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
				if num != 1 || typ != protowire.BytesType {
					return
				}
				eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
					switch {
					case num == 1 && typ == protowire.VarintType:
						retryDelay += time.Duration(int64(x)) * time.Second
					case num == 2 && typ == protowire.VarintType:
						retryDelay += time.Duration(int32(x))
					}
				})
			})
		}
	})
	return message, retryDelay, err
}

// eachField calls fn with each field of a message: a varint's or fixed
// value's number in x, a length-delimited field's bytes in v.
func eachField(msg []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64)) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(msg)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(msg)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(msg)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(msg)
		default:
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		fn(num, typ, v, x)
	}
	return nil
}
