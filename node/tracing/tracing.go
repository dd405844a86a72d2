// Package tracing exports what the node does as OpenTelemetry traces over OTLP
// (HTTP or gRPC): a span per tool call with the attributes of the semantic
// conventions for MCP and GenAI tools, per hook run and per egress connection
// (docs/audit.md, "Traces"). It is off unless --otlp-endpoint or the standard
// OTEL_EXPORTER_OTLP_* variables ask for it; off, nothing of it runs.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/gateway"
)

// Config says where traces go.
type Config struct {
	// Endpoint is --otlp-endpoint ("" to take the OTEL_EXPORTER_OTLP_*
	// variables' alone).
	Endpoint string
	// Getenv reads the environment (os.Getenv).
	Getenv  func(string) string
	Version string
}

// Enabled reports whether traces are asked for: the flag, or an OTLP endpoint in
// the environment, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func Enabled(c Config) bool {
	env := c.Getenv
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(env("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return c.Endpoint != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Protocol is the OTLP protocol the variables choose: grpc or http/protobuf
// (their default).
func Protocol(getenv func(string) string) (string, error) {
	p := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("OTLP protocol %q: the node speaks grpc and http/protobuf", p)
}

// Tracer makes the node's spans. Its methods are safe for concurrent use.
type Tracer struct {
	tp    *sdktrace.TracerProvider
	t     trace.Tracer
	props propagation.TextMapPropagator
}

// New starts the exporter and the span batcher. The OTEL_EXPORTER_OTLP_*
// variables (headers, certificates, timeout, compression) apply as the
// OpenTelemetry specification has them; the flag's endpoint wins over theirs.
// A variable that cannot be read is an error naming it.
func New(ctx context.Context, c Config) (*Tracer, error) {
	proto, err := Protocol(c.Getenv)
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(c, proto)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (%s): %w", proto, err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithHost(),
		resource.WithAttributes(attribute.String("service.name", "oz0-node"), attribute.String("service.version", c.Version)))
	if err != nil {
		res = resource.Empty()
	}
	// A service.name in OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES wins.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{tp: tp, t: tp.Tracer("oz0.ai/node"), props: propagation.TraceContext{}}, nil
}

// tracesURL is the flag's base URL with OTLP/HTTP's traces path when it names
// none (as OTEL_EXPORTER_OTLP_ENDPOINT is read).
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// Shutdown sends the spans still batched and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// ToolCall is a tools/call as the node served it: an MCP server span
// "tools/call <tool>", a child of the caller's span when the call's _meta
// carries a W3C trace context.
func (t *Tracer) ToolCall(r *gateway.CallRecord, argsDigest string) {
	ctx := context.Background()
	if r.TraceParent != "" {
		carrier := propagation.MapCarrier{"traceparent": r.TraceParent}
		if r.TraceState != "" {
			carrier["tracestate"] = r.TraceState
		}
		ctx = t.props.Extract(ctx, carrier)
	}
	attrs := []attribute.KeyValue{
		attribute.String("mcp.method.name", "tools/call"),
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", r.Tool),
		attribute.String("oz0.plugin", r.Plugin),
		attribute.String("oz0.server", r.Server),
		attribute.String("oz0.door", r.Door),
		attribute.String("oz0.path", r.Path),
		attribute.String("oz0.decision", r.Decision),
		attribute.String("oz0.args.sha256", argsDigest),
		attribute.Int("oz0.result.bytes", r.ResultBytes),
	}
	if r.RequestID != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", r.RequestID))
	}
	if r.SessionID != "" {
		attrs = append(attrs, attribute.String("mcp.session.id", r.SessionID))
	}
	if r.Protocol != "" {
		attrs = append(attrs, attribute.String("mcp.protocol.version", r.Protocol))
	}
	if r.Door == "stdio" {
		attrs = append(attrs, attribute.String("network.transport", "pipe"))
	} else {
		attrs = append(attrs, attribute.String("network.protocol.name", "http"))
	}
	if r.Reason != "" {
		attrs = append(attrs, attribute.String("oz0.rule", r.Reason))
	}
	if r.Outcome != "" {
		attrs = append(attrs, attribute.String("oz0.outcome", r.Outcome))
	}
	errType, status := "", ""
	switch {
	case r.Decision != gateway.DecisionAllow:
		// The caller gets the refusal as a tool error (isError).
		errType, status = "tool_error", r.Decision+": "+r.Reason
	case r.Outcome == "tool-error":
		errType, status = "tool_error", "the tool answered isError"
	case r.Outcome == "rpc-error":
		code := strconv.FormatInt(r.RPCError, 10)
		errType, status = code, "JSON-RPC error "+code
		attrs = append(attrs, attribute.String("rpc.response.status_code", code))
	case r.Outcome == "no-answer" || r.Outcome == "cancelled":
		errType, status = strings.ReplaceAll(r.Outcome, "-", "_"), r.Outcome
	}
	if errType != "" {
		attrs = append(attrs, attribute.String("error.type", errType))
	}
	_, span := t.t.Start(ctx, "tools/call "+r.Tool, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(r.Start), trace.WithAttributes(attrs...))
	if errType != "" {
		span.SetStatus(codes.Error, status)
	}
	span.End(trace.WithTimestamp(r.Start.Add(r.Took)))
}

// HookRun is one run of a plugin's hook: an internal span "hook <event>".
func (t *Tracer) HookRun(run api.HookRun, session string) {
	end, err := time.Parse(time.RFC3339Nano, run.Time)
	if err != nil {
		end = time.Now()
	}
	start := end.Add(-time.Duration(run.Seconds * float64(time.Second)))
	attrs := []attribute.KeyValue{
		attribute.String("oz0.plugin", run.Plugin),
		attribute.String("oz0.hook.event", run.Event),
		attribute.String("oz0.hook.source", run.Source),
		attribute.String("oz0.hook.decision", run.Decision),
	}
	if run.Tool != "" {
		attrs = append(attrs, attribute.String("gen_ai.tool.name", run.Tool))
	}
	if run.Network != "" {
		attrs = append(attrs, attribute.String("oz0.hook.network", run.Network))
	}
	if len(run.Dropped) > 0 {
		attrs = append(attrs, attribute.StringSlice("oz0.hook.dropped", run.Dropped))
	}
	if session != "" {
		attrs = append(attrs, attribute.String("oz0.session", session))
	}
	_, span := t.t.Start(context.Background(), "hook "+run.Event, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	switch run.Decision {
	case "error", "timeout", "invalid-output":
		span.SetStatus(codes.Error, run.Decision)
		span.SetAttributes(attribute.String("error.type", run.Decision))
	}
	span.End(trace.WithTimestamp(end))
}

// Egress is an egress decision: an ended connection as a client span "egress
// connect" over its duration, a refusal or a failure as a span of no length
// with an error. An allow line adds nothing: its connection's end does.
func (t *Tracer) Egress(d api.EgressDecision) {
	if d.Decision == "allow" {
		return
	}
	end, err := time.Parse(time.RFC3339Nano, d.Time)
	if err != nil {
		end = time.Now()
	}
	start := end.Add(-time.Duration(d.Seconds * float64(time.Second)))
	attrs := []attribute.KeyValue{
		attribute.String("server.address", d.Host),
		attribute.Int("server.port", d.Port),
		attribute.String("oz0.plugin", d.Plugin),
		attribute.String("oz0.egress.decision", d.Decision),
		attribute.String("oz0.egress.rule", d.Rule),
	}
	if d.Server != "" {
		attrs = append(attrs, attribute.String("oz0.server", d.Server))
	}
	if d.Addr != "" {
		attrs = append(attrs, attribute.String("network.peer.address", d.Addr))
	}
	if d.Bytes > 0 {
		attrs = append(attrs, attribute.Int64("oz0.egress.bytes", d.Bytes))
	}
	_, span := t.t.Start(context.Background(), "egress connect", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	switch d.Decision {
	case "deny":
		span.SetStatus(codes.Error, "refused: "+d.Rule)
		span.SetAttributes(attribute.String("error.type", "refused"))
	case "error":
		span.SetStatus(codes.Error, d.Rule)
		span.SetAttributes(attribute.String("error.type", "unreachable"))
	}
	span.End(trace.WithTimestamp(end))
}
