package tracing

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"oz0.ai/node/internal/otlptest"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/gateway"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Over OTLP/HTTP and gRPC alike, a real Collector receiver gets the node's spans
// with the semantic conventions' attributes: a tool call as an MCP server span
// under the caller's trace, a refused call as an error, a hook run, an egress
// connection and a refusal.
func TestSpansReachARealReceiver(t *testing.T) {
	rcv := otlptest.Start(t)
	for _, c := range []struct{ proto, endpoint string }{
		{"http/protobuf", "http://" + rcv.HTTP},
		{"grpc", "http://" + rcv.GRPC},
	} {
		t.Run(c.proto, func(t *testing.T) {
			cfg := Config{Endpoint: c.endpoint, Version: "test", Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": c.proto})}
			if !Enabled(cfg) {
				t.Fatal("the flag alone does not enable tracing")
			}
			tr, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now().Add(-50 * time.Millisecond)
			tool := "weather__today_" + c.proto[:4]
			tr.ToolCall(&gateway.CallRecord{Door: "http", Path: "fast", SessionID: "sess-1", RequestID: "7", Protocol: "2025-06-18",
				Plugin: "weather", Server: "main", Tool: tool, Decision: gateway.DecisionAllow, Outcome: "ok", ResultBytes: 42,
				Args: json.RawMessage(`{"secret":"x"}`), TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				Start: start, Took: 30 * time.Millisecond}, "abc123")
			tr.ToolCall(&gateway.CallRecord{Door: "stdio", Path: "sdk", Plugin: "files", Server: "main", Tool: "files__delete_" + c.proto[:4],
				Decision: gateway.DecisionDeny, Reason: "the tenant's tool rules refuse it: deny *__delete* (line 2)", Start: start, Took: time.Millisecond}, "def456")
			tr.HookRun(api.HookRun{Time: time.Now().UTC().Format(time.RFC3339Nano), Plugin: "lint", Event: "PreToolUse", Tool: tool, Source: "gateway",
				Decision: "deny", Seconds: 0.02, Network: "isolated", Dropped: []string{"updatedInput"}}, "sess-9")
			tr.Egress(api.EgressDecision{Time: time.Now().UTC().Format(time.RFC3339Nano), Plugin: "weather", Server: "main", Host: "api.example.com",
				Port: 443, Addr: "93.184.216.34", Decision: "end", Rule: "manifest api.example.com + tenant api.example.com (line 1)", Bytes: 1234, Seconds: 0.5})
			tr.Egress(api.EgressDecision{Time: time.Now().UTC().Format(time.RFC3339Nano), Plugin: "weather", Host: "evil.example.com", Port: 443, Decision: "deny", Rule: "manifest+tenant"})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}

			call := rcv.WaitSpan(t, "tools/call "+tool, nil)
			want := map[string]string{"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
				"jsonrpc.request.id": "7", "mcp.session.id": "sess-1", "mcp.protocol.version": "2025-06-18", "network.protocol.name": "http",
				"oz0.plugin": "weather", "oz0.server": "main", "oz0.decision": "allow", "oz0.args.sha256": "abc123", "oz0.path": "fast", "oz0.result.bytes": "42"}
			for k, v := range want {
				if call.Attrs[k] != v {
					t.Errorf("tool call span %s = %q, want %q", k, call.Attrs[k], v)
				}
			}
			if call.Kind != "Server" || call.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || call.ParentID != "00f067aa0ba902b7" || call.Status == "Error" {
				t.Errorf("tool call span: kind %s trace %s parent %s status %s", call.Kind, call.TraceID, call.ParentID, call.Status)
			}
			if d := call.End.Sub(call.Start); d != 30*time.Millisecond {
				t.Errorf("tool call span lasts %v, want the call's 30ms", d)
			}
			if call.Resource["service.name"] != "oz0-node" || call.Resource["service.version"] != "test" {
				t.Errorf("resource %v", call.Resource)
			}
			if _, ok := call.Attrs["gen_ai.tool.call.arguments"]; ok {
				t.Error("a span carries the call's arguments")
			}
			refused := rcv.WaitSpan(t, "tools/call files__delete_"+c.proto[:4], nil)
			if refused.Status != "Error" || refused.Attrs["error.type"] != "tool_error" || refused.Attrs["oz0.decision"] != "deny" ||
				refused.Attrs["network.transport"] != "pipe" || refused.Attrs["oz0.rule"] == "" {
				t.Errorf("refused call span %+v", refused)
			}
			hook := rcv.WaitSpan(t, "hook PreToolUse", func(s Span) bool { return s.Attrs["gen_ai.tool.name"] == tool })
			if hook.Attrs["oz0.plugin"] != "lint" || hook.Attrs["oz0.hook.decision"] != "deny" || hook.Attrs["oz0.hook.network"] != "isolated" {
				t.Errorf("hook span %+v", hook)
			}
			conn := rcv.WaitSpan(t, "egress connect", func(s Span) bool { return s.Attrs["oz0.egress.decision"] == "end" })
			if conn.Kind != "Client" || conn.Attrs["server.address"] != "api.example.com" || conn.Attrs["server.port"] != "443" ||
				conn.Attrs["network.peer.address"] != "93.184.216.34" || conn.Attrs["oz0.egress.bytes"] != "1234" || conn.End.Sub(conn.Start) != 500*time.Millisecond {
				t.Errorf("egress span %+v", conn)
			}
			deny := rcv.WaitSpan(t, "egress connect", func(s Span) bool { return s.Attrs["server.address"] == "evil.example.com" })
			if deny.Status != "Error" || deny.Attrs["error.type"] != "refused" {
				t.Errorf("egress refusal span %+v", deny)
			}
			t.Logf("%d spans received", len(rcv.Spans()))
			rcv.Sink.Reset()
		})
	}
}

// Span is otlptest's, for short.
type Span = otlptest.Span

func TestEnabledAndProtocol(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want bool
	}{
		{Config{Getenv: env(nil)}, false},
		{Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})}, true},
		{Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})}, true},
		{Config{Endpoint: "http://c:4318", Getenv: env(map[string]string{"OTEL_SDK_DISABLED": "true"})}, false},
		{Config{Endpoint: "http://c:4318", Getenv: env(map[string]string{"OTEL_TRACES_EXPORTER": "none"})}, false},
	} {
		if got := Enabled(c.cfg); got != c.want {
			t.Errorf("%+v: Enabled %v", c.cfg.Endpoint, got)
		}
	}
	if _, err := Protocol(env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})); err == nil {
		t.Error("http/json was taken")
	}
	if p, _ := Protocol(env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})); p != "grpc" {
		t.Errorf("the traces protocol wins: %s", p)
	}
	if u := tracesURL("http://c:4318"); u != "http://c:4318/v1/traces" {
		t.Errorf("tracesURL %s", u)
	}
	if u := tracesURL("https://c/otlp/v1/traces"); u != "https://c/otlp/v1/traces" {
		t.Errorf("tracesURL %s", u)
	}
}
