package tracing

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

var (
	traceID  = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	parentID = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

func spanID(i int) trace.SpanID { return trace.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i + 1)} }

// testSpans are n simple spans of one resource and scope.
func testSpans(n int) []sdktrace.ReadOnlySpan {
	res := resource.NewSchemaless(attribute.String("service.name", "oz0-node"))
	start := time.Unix(1700000000, 5)
	var out []sdktrace.ReadOnlySpan
	for i := range n {
		out = append(out, tracetest.SpanStub{
			Name:        "span " + string(rune('a'+i)),
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID(i), TraceFlags: trace.FlagsSampled}),
			SpanKind:    trace.SpanKindInternal, StartTime: start, EndTime: start.Add(time.Millisecond),
			Resource: res, InstrumentationScope: instrumentation.Scope{Name: "oz0.ai/node"},
		}.Snapshot())
	}
	return out
}

// decode reads an ExportTraceServiceRequest with the Collector's own decoder.
func decode(t *testing.T, b []byte) ptrace.Traces {
	t.Helper()
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(b); err != nil {
		t.Fatalf("the Collector cannot read the request: %v", err)
	}
	return req.Traces()
}

// Every field the node writes is read back by the Collector's own decoder as
// it was: ids, trace state, parent, flags with a remote parent, kind, times,
// every attribute value type (nested lists and maps, bytes, a value too long
// for a one-byte length), events, links, dropped counts, status, and spans
// grouped by resource and by scope with their schema URLs.
func TestEncodingAsTheCollectorReadsIt(t *testing.T) {
	ts, _ := trace.ParseTraceState("vendor=x,other=y")
	start := time.Unix(1700000000, 123456789)
	long := strings.Repeat("é", 20000) // a length of three varint bytes
	attrs := []attribute.KeyValue{
		attribute.String("s", "text"), attribute.String("empty", ""), attribute.String("long", long),
		attribute.Bool("t", true), attribute.Bool("f", false),
		attribute.Int64("i", -42), attribute.Int64("zero", 0), attribute.Float64("x", 2.5),
		attribute.StringSlice("ss", []string{"a", ""}), attribute.Int64Slice("is", []int64{1, -2}),
		attribute.Float64Slice("fs", []float64{0.5}), attribute.BoolSlice("bs", []bool{true, false}),
		attribute.ByteSlice("bytes", []byte{0, 1, 2}),
		attribute.Slice("mixed", attribute.StringValue("a"), attribute.Int64Value(1), attribute.SliceValue(attribute.BoolValue(true))),
		attribute.Map("map", attribute.String("k", "v"), attribute.Map("inner", attribute.Int("n", 1))),
		{Key: "nothing"},
	}
	want := map[string]any{
		"s": "text", "empty": "", "long": long, "t": true, "f": false, "i": int64(-42), "zero": int64(0), "x": 2.5,
		"ss": []any{"a", ""}, "is": []any{int64(1), int64(-2)}, "fs": []any{0.5}, "bs": []any{true, false},
		"bytes": []byte{0, 1, 2}, "mixed": []any{"a", int64(1), []any{true}},
		"map": map[string]any{"k": "v", "inner": map[string]any{"n": int64(1)}}, "nothing": nil,
	}
	res1 := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "one"))
	res2 := resource.NewSchemaless(attribute.String("service.name", "two"))
	scopeA := instrumentation.Scope{Name: "a", Version: "1.0", SchemaURL: "https://example.com/s", Attributes: attribute.NewSet(attribute.Int("k", 7))}
	scopeB := instrumentation.Scope{Name: "b"}
	linked := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled, Remote: true})
	full := tracetest.SpanStub{
		Name:        "full",
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID(0), TraceFlags: trace.FlagsSampled, TraceState: ts}),
		Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: parentID, Remote: true}),
		SpanKind:    trace.SpanKindServer, StartTime: start, EndTime: start.Add(30 * time.Millisecond),
		Attributes: attrs, DroppedAttributes: 3, DroppedEvents: 4, DroppedLinks: 5,
		Events:   []sdktrace.Event{{Name: "ev", Time: start.Add(time.Millisecond), Attributes: []attribute.KeyValue{attribute.Int("n", 1)}, DroppedAttributeCount: 2}},
		Links:    []sdktrace.Link{{SpanContext: linked, Attributes: []attribute.KeyValue{attribute.String("why", "batch")}, DroppedAttributeCount: 1}},
		Status:   sdktrace.Status{Code: codes.Ok},
		Resource: res1, InstrumentationScope: scopeA,
	}.Snapshot()
	stub := func(name string, kind trace.SpanKind, st sdktrace.Status, res *resource.Resource, sc instrumentation.Scope) sdktrace.ReadOnlySpan {
		return tracetest.SpanStub{Name: name, SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID(len(name))}),
			SpanKind: kind, StartTime: start, EndTime: start, Status: st, Resource: res, InstrumentationScope: sc}.Snapshot()
	}
	spans := []sdktrace.ReadOnlySpan{
		full,
		stub("client", trace.SpanKindClient, sdktrace.Status{Code: codes.Error, Description: "refused"}, res1, scopeB),
		stub("producer", trace.SpanKindProducer, sdktrace.Status{}, res2, scopeB),
		stub("consumer-a", trace.SpanKindConsumer, sdktrace.Status{}, res1, scopeA),
	}

	td := decode(t, encodeRequest(spans))
	if td.SpanCount() != 4 || td.ResourceSpans().Len() != 2 {
		t.Fatalf("%d spans in %d resources, want 4 in 2", td.SpanCount(), td.ResourceSpans().Len())
	}
	rs := td.ResourceSpans().At(0)
	if rs.SchemaUrl() != res1.SchemaURL() || rs.Resource().Attributes().AsRaw()["service.name"] != "one" || rs.ScopeSpans().Len() != 2 {
		t.Fatalf("first resource: schema %q, attributes %v, %d scopes", rs.SchemaUrl(), rs.Resource().Attributes().AsRaw(), rs.ScopeSpans().Len())
	}
	ss := rs.ScopeSpans().At(0)
	if sc := ss.Scope(); sc.Name() != "a" || sc.Version() != "1.0" || ss.SchemaUrl() != "https://example.com/s" ||
		!reflect.DeepEqual(sc.Attributes().AsRaw(), map[string]any{"k": int64(7)}) || ss.Spans().Len() != 2 {
		t.Fatalf("scope a: %q %q %q %v, %d spans", sc.Name(), sc.Version(), ss.SchemaUrl(), sc.Attributes().AsRaw(), ss.Spans().Len())
	}
	s := ss.Spans().At(0)
	if s.Name() != "full" || s.TraceID() != pcommon.TraceID(traceID) || s.SpanID() != pcommon.SpanID(spanID(0)) ||
		s.ParentSpanID() != pcommon.SpanID(parentID) || s.TraceState().AsRaw() != "vendor=x,other=y" {
		t.Errorf("ids: %s %s %s %s parent %s state %q", s.Name(), s.TraceID(), s.SpanID(), s.ParentSpanID(), s.ParentSpanID(), s.TraceState().AsRaw())
	}
	if s.Flags() != 0x301 || s.Kind() != ptrace.SpanKindServer || !s.StartTimestamp().AsTime().Equal(start) || s.EndTimestamp().AsTime().Sub(start) != 30*time.Millisecond {
		t.Errorf("flags %#x kind %v start %v end %v", s.Flags(), s.Kind(), s.StartTimestamp().AsTime(), s.EndTimestamp().AsTime())
	}
	if got := s.Attributes().AsRaw(); !reflect.DeepEqual(got, want) {
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("attribute %s = %#v, want %#v", k, got[k], v)
			}
		}
	}
	if s.DroppedAttributesCount() != 3 || s.DroppedEventsCount() != 4 || s.DroppedLinksCount() != 5 {
		t.Errorf("dropped %d %d %d", s.DroppedAttributesCount(), s.DroppedEventsCount(), s.DroppedLinksCount())
	}
	if ev := s.Events().At(0); s.Events().Len() != 1 || ev.Name() != "ev" || ev.Timestamp().AsTime().Sub(start) != time.Millisecond ||
		ev.Attributes().AsRaw()["n"] != int64(1) || ev.DroppedAttributesCount() != 2 {
		t.Errorf("event %q %v %v %d", ev.Name(), ev.Timestamp().AsTime(), ev.Attributes().AsRaw(), ev.DroppedAttributesCount())
	}
	if l := s.Links().At(0); s.Links().Len() != 1 || l.TraceID() != pcommon.TraceID(linked.TraceID()) || l.SpanID() != pcommon.SpanID(linked.SpanID()) ||
		l.Flags() != 0x301 || l.Attributes().AsRaw()["why"] != "batch" || l.DroppedAttributesCount() != 1 {
		t.Errorf("link %s %s flags %#x %v %d", l.TraceID(), l.SpanID(), l.Flags(), l.Attributes().AsRaw(), l.DroppedAttributesCount())
	}
	if s.Status().Code() != ptrace.StatusCodeOk {
		t.Errorf("status %v", s.Status().Code())
	}
	if c := ss.Spans().At(1); c.Name() != "consumer-a" || c.Kind() != ptrace.SpanKindConsumer || c.Flags() != 0x100 || !c.ParentSpanID().IsEmpty() {
		t.Errorf("second span of scope a: %q %v flags %#x parent %s", c.Name(), c.Kind(), c.Flags(), c.ParentSpanID())
	}
	c := rs.ScopeSpans().At(1).Spans().At(0)
	if rs.ScopeSpans().At(1).Scope().Name() != "b" || c.Name() != "client" || c.Kind() != ptrace.SpanKindClient ||
		c.Status().Code() != ptrace.StatusCodeError || c.Status().Message() != "refused" {
		t.Errorf("scope b: %q %v %v %q", c.Name(), c.Kind(), c.Status().Code(), c.Status().Message())
	}
	p := td.ResourceSpans().At(1)
	if p.Resource().Attributes().AsRaw()["service.name"] != "two" || p.ScopeSpans().At(0).Spans().At(0).Kind() != ptrace.SpanKindProducer {
		t.Errorf("second resource %v", p.Resource().Attributes().AsRaw())
	}
}

// The answers a collector gives are read: a partial success's rejected spans
// and message, and a google.rpc.Status's message and RetryInfo delay.
func TestAnswersAreRead(t *testing.T) {
	resp := appendMessage(nil, 1, func(b []byte) []byte {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 2)
		return appendString(b, 2, "too old")
	})
	if n, msg, err := partialSuccess(resp); n != 2 || msg != "too old" || err != nil {
		t.Errorf("partial success: %d %q %v", n, msg, err)
	}
	if n, msg, err := partialSuccess(nil); n != 0 || msg != "" || err != nil {
		t.Errorf("an empty answer: %d %q %v", n, msg, err)
	}
	if _, _, err := partialSuccess([]byte{0x0a, 0x05, 1}); err == nil {
		t.Error("a truncated answer was read")
	}
	st := rpcStatusMessage(14, "busy", 1500*time.Millisecond)
	if msg, wait, err := rpcStatus(st); msg != "busy" || wait != 1500*time.Millisecond || err != nil {
		t.Errorf("status: %q %v %v", msg, wait, err)
	}
}

// rpcStatusMessage is a google.rpc.Status with a RetryInfo when wait > 0.
func rpcStatusMessage(code int, message string, wait time.Duration) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(code))
	b = appendString(b, 2, message)
	if wait > 0 {
		b = appendMessage(b, 3, func(b []byte) []byte {
			b = appendString(b, 1, "type.googleapis.com/google.rpc.RetryInfo")
			return appendMessage(b, 2, func(b []byte) []byte {
				return appendMessage(b, 1, func(b []byte) []byte {
					b = protowire.AppendTag(b, 1, protowire.VarintType)
					b = protowire.AppendVarint(b, uint64(wait/time.Second))
					b = protowire.AppendTag(b, 2, protowire.VarintType)
					return protowire.AppendVarint(b, uint64(wait%time.Second))
				})
			})
		})
	}
	return b
}
