package tracing

import (
	"os/exec"
	"strings"
	"testing"
)

// The package links no gRPC and no generated OTLP messages: their package
// initialisers would cost every node process memory with tracing off, the
// reason the exporter is the node's own.
func TestLinksNoGRPC(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the check needs the go command: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, bad := range []string{"grpc", "go.opentelemetry.io/proto/", "otlptrace", "genproto"} {
			if strings.Contains(dep, bad) {
				t.Errorf("node/tracing links %s", dep)
			}
		}
	}
}
