package audit

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// A call's line as the node writes one per tools/call, through the stream to
// disk: the writer's CPU per line (docs/performance.md, issue 34).
func BenchmarkStreamCallLines(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"text": "hello", "n": 3}`)
	b.ReportAllocs()
	for b.Loop() {
		s.Add(api.AuditRecord{Time: time.Now().UTC().Format(time.RFC3339Nano), Kind: "call", Door: "http", Path: "fast",
			Session: "3UQ5ZJ7KX4TQ2DFYWJ6XW2D3GA", RequestID: "42", Plugin: "echo", Server: "main", Tool: "echo__echo",
			Decision: "allow", Outcome: "ok", ResultBytes: 61, ArgsSHA256: ArgsDigest(args), Seconds: 0.000612345})
	}
	s.Close()
}

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
