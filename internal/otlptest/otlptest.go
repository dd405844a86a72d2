// Package otlptest runs a real OTLP receiver, the OpenTelemetry Collector's own,
// in a test: the node's traces are checked where a collector would get them.
package otlptest

import (
	"context"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Receiver is a real OTLP receiver, the OpenTelemetry Collector's own, serving
// gRPC and HTTP on loopback ports; what it receives lands in Sink.
type Receiver struct {
	Sink       *consumertest.TracesSink
	GRPC, HTTP string // host:port
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start starts the Collector's OTLP receiver for the test.
func Start(t testing.TB) *Receiver {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	r := &Receiver{Sink: new(consumertest.TracesSink), GRPC: freePort(t), HTTP: freePort(t)}
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = r.GRPC
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = r.HTTP
	rcv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, r.Sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcv.Shutdown(context.Background()) })
	return r
}

// Span is a received span with its attributes as strings.
type Span struct {
	Name, Kind, Status, StatusMsg string
	TraceID, ParentID             string
	Attrs                         map[string]string
	Resource                      map[string]string
	Start, End                    time.Time
}

// Spans are every span the receiver got so far.
func (r *Receiver) Spans() []Span {
	var out []Span
	for _, td := range r.Sink.AllTraces() {
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			rs := rss.At(i)
			res := attrMap(rs.Resource().Attributes())
			sss := rs.ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				ss := sss.At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					s := ss.At(k)
					out = append(out, Span{Name: s.Name(), Kind: s.Kind().String(), Status: s.Status().Code().String(), StatusMsg: s.Status().Message(),
						TraceID: s.TraceID().String(), ParentID: s.ParentSpanID().String(), Attrs: attrMap(s.Attributes()), Resource: res,
						Start: s.StartTimestamp().AsTime(), End: s.EndTimestamp().AsTime()})
				}
			}
		}
	}
	return out
}

// WaitSpan waits for a span of that name.
func (r *Receiver) WaitSpan(t testing.TB, name string, ok func(Span) bool) Span {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, s := range r.Spans() {
			if s.Name == name && (ok == nil || ok(s)) {
				return s
			}
		}
	}
	t.Fatalf("the receiver got no span %q; it got %+v", name, r.Spans())
	return Span{}
}

func attrMap(m pcommon.Map) map[string]string {
	out := map[string]string{}
	m.Range(func(k string, v pcommon.Value) bool {
		out[k] = v.AsString()
		return true
	})
	return out
}
