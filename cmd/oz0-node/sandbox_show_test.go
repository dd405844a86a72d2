package main

import (
	"strings"
	"testing"
)

// Without a running node the Seatbelt preview still shows the network rule, with
// PORT for the port the node assigns at start, and says so.
func TestSandboxShowSeatbeltWithoutANode(t *testing.T) {
	bin, data := execNode(t, "demo")
	out, errs, code := runOz(bin, data, nil, "sandbox", "show", "demo", "--backend", "seatbelt")
	if code != 0 {
		t.Fatalf("sandbox show: exit %d: %s", code, errs)
	}
	for _, want := range []string{`(allow network-outbound (remote ip "localhost:PORT"))`, "port is assigned when the node starts", "network proxy"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Network: none") {
		t.Errorf("sandbox show says the sandbox has no network:\n%s", out)
	}
}
