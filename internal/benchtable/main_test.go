package main

import (
	"strings"
	"testing"
)

func TestParseAndTable(t *testing.T) {
	in := `goos: linux
BenchmarkToolCall/direct-2   	   13756	    277577 ns/op	      3604 calls/s	        84.00 p50-µs	       445.0 p90-µs
BenchmarkToolCall/gateway-2  	    2097	   2133412 ns/op	       468.8 calls/s	       786.0 p50-µs	      3934 p90-µs
BenchmarkNodeRSS50-2   	       1	        27.85 node-RSS-MB
PASS`
	res := parse(strings.NewReader(in))
	if res["ToolCall/gateway"]["p50-µs"] != 786 || res["NodeRSS50"]["node-RSS-MB"] != 27.85 {
		t.Fatalf("parsed %v", res)
	}
	var b strings.Builder
	table(&b, res)
	out := b.String()
	for _, want := range []string{"through the gateway", "786", "9.36", "not measured", "27.9"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
