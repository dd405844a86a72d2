package launch

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// aProxy stands in for the node's proxy: Attach only records a closure that
// would call ListenIn when the sandbox starts.
type aProxy struct{ NodeProxy }

// A non-root node serves a bwrap sandbox's proxy and resolver in its namespace when
// nsenter is there to start its helper with; without it the sandbox keeps the
// bridge and the proxy variables, and the node says why once.
func TestAttachInProcessOnANonRootNodeNeedsNsenter(t *testing.T) {
	var logs bytes.Buffer
	e := &InProcess{Proxy: aProxy{}, Root: false, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	spec := func() *sandbox.Spec {
		return &sandbox.Spec{Backend: policy.BackendBwrap, Network: policy.NetProxy,
			Proxy: &sandbox.Proxy{SocketDir: "/run/x", Port: 3128}}
	}

	t.Setenv("PATH", t.TempDir()) // no nsenter
	for range 2 {
		s := spec()
		e.Attach(s)
		if s.Proxy.Attach != nil || s.Proxy.Resolver != "" {
			t.Errorf("without nsenter: Attach set %v, resolver %q; want the bridge and the variables only", s.Proxy.Attach != nil, s.Proxy.Resolver)
		}
	}
	if n := strings.Count(logs.String(), "nsenter (util-linux) not found"); n != 1 {
		t.Errorf("the missing nsenter was logged %d times, want once:\n%s", n, logs.String())
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nsenter"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	s := spec()
	e.Attach(s)
	if s.Proxy.Attach == nil || s.Proxy.Resolver != sandbox.ResolverAddr {
		t.Errorf("with nsenter: Attach set %v, resolver %q; want the node's listener and resolver in the namespace", s.Proxy.Attach != nil, s.Proxy.Resolver)
	}
}
