package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/tracing"
)

// BenchmarkTracedCall is what traces cost a tool call: two nodes on the same
// fixture server under bwrap, both writing the audit stream (as every node
// does), one also exporting a span per call over OTLP/HTTP to an endpoint on
// loopback that takes the request and answers 200. A collector's own decoding is
// not the node's cost and runs elsewhere (the node's tests check the spans
// against the Collector's receiver: node/tracing). One caller's latency through
// each node, 8 callers' calls/s through the traced one in bursts paired with the
// untraced one's just before, and the node's work for one span alone.
func BenchmarkTracedCall(b *testing.B) {
	be := bwrapOrSkip(b)
	var posts atomic.Int64
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		posts.Add(1)
	}))
	b.Cleanup(otlp.Close)
	newTracer := func() *tracing.Tracer {
		tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: otlp.URL, Version: "bench", Getenv: func(string) string { return "" }})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Shutdown(context.Background()) })
		return tr
	}
	start := func(traced bool) *mcp.ClientSession {
		d, n := testNode(b, "demo", "demo")
		s, err := audit.Open(d.Audit(), audit.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		cfg := daemon.Config{Node: n, Backends: map[string]sandbox.Backend{policy.BackendBwrap: be}, Version: "bench", Audit: s}
		if traced {
			cfg.Tracer = newTracer()
		}
		return throughGatewayWith(b, d, cfg)
	}
	plain, traced := start(false), start(true)
	b.Run("audit", func(b *testing.B) { callLoop(b, plain, "demo__echo", 1) })
	b.Run("audit+traces", func(b *testing.B) { callLoop(b, traced, "demo__echo", 1) })
	b.Run("traced-8", func(b *testing.B) { pairedBursts(b, plain, "demo__echo", traced, "demo__echo") })
	b.Run("span", func(b *testing.B) {
		tr := newTracer()
		rec := &gateway.CallRecord{Door: "stdio", Path: "fast", Session: "s", RequestID: "1", Protocol: "2025-06-18", Plugin: "demo", Server: "main",
			Tool: "demo__echo", Decision: gateway.DecisionAllow, Outcome: "ok", ResultBytes: 56, Args: json.RawMessage(`{"text":"x"}`),
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Start: time.Now(), Took: time.Millisecond}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			tr.ToolCall(rec, "4a2020c272021ef3a0d0154711adabe9bb4014c59273654ba2c01540c7f24216")
		}
	})
	if posts.Load() == 0 {
		b.Fatal("the traced node exported nothing")
	}
}
