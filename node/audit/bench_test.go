package audit

import (
	"bytes"
	"encoding/json"
	"testing"

	"oz0.ai/node/node/api"
)

// What the writer spends on a call's line (docs/performance.md, issue 34): digesting
// compact arguments, encoding the line.
func BenchmarkArgsDigestCompact(b *testing.B) {
	args := json.RawMessage(`{"text":"hello","n":3}`)
	for b.Loop() {
		ArgsDigest(args)
	}
}

func BenchmarkLineEncode(b *testing.B) {
	r := api.AuditRecord{Seq: 123456, Time: "2026-12-02T10:00:00.123456789Z", Kind: "call", Door: "http", Path: "fast",
		Session: "3UQ5ZJ7KX4TQ2DFYWJ6XW2D3GA", RequestID: "42", Plugin: "echo", Server: "main", Tool: "echo__echo",
		Decision: "allow", Outcome: "ok", ResultBytes: 61, ArgsSHA256: ArgsDigest(nil), Seconds: 0.000612345}
	b.Run("encoding-json", func(b *testing.B) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			enc.Encode(&r)
		}
	})
	b.Run("appendLine", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = appendLine(buf[:0], &r)
		}
	})
}
