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

// A row measured in pairs with its baseline shows that ratio, marked, rather than
// the ratio of the two medians.
func TestPairedRatio(t *testing.T) {
	in := `BenchmarkEgressFromSandbox/direct-2   	3	 1 ns/op	      3000 curl-MB/s
BenchmarkEgressFromSandbox/sandbox-connect-2   	3	 1 ns/op	      1500 curl-MB/s	0.7100 x-paired-direct
BenchmarkEgressFromSandbox/sandbox-http-2   	3	 1 ns/op	      1200 curl-MB/s
`
	var b strings.Builder
	table(&b, parse(strings.NewReader(in)))
	out := b.String()
	for _, want := range []string{"0.71*", "0.40"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "0.50") {
		t.Errorf("the paired row shows the ratio of medians:\n%s", out)
	}
}
