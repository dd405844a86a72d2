package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/datadir"
)

// exec builds its sandbox once, its egress endpoint given before the spec, and
// that sandbox is the one `sandbox show` prints for the same server: the same
// user, mounts, limits, network, environment and endpoint. Only the command
// differs, and the kind and server name that name its cgroup (exec without
// --server runs beside the server, not in its cgroup).
func TestExecSpecIsTheOneSandboxShowPrints(t *testing.T) {
	_, data := execNode(t, "demo")
	d, err := datadir.New(data)
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"/bin/sh", "-c", "true"}
	reachableBinary(t)
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			x, err := prepareExec(context.Background(), d, "demo", "", backend, argv)
			if err != nil {
				t.Fatal(err)
			}
			defer x.stop()
			// Shown while exec serves the endpoint, as beside a running node.
			shown, err := showSpec(d, "demo", "", backend)
			if err != nil {
				t.Fatal(err)
			}
			spec := *x.start.Spec
			if spec.Proxy == nil || spec.Proxy.SocketDir == "" {
				t.Fatalf("exec's sandbox has no egress endpoint: %+v", spec.Proxy)
			}
			// sandbox show prints the spec before a start attaches egress inside the
			// sandbox (a listener and resolver in its network namespace).
			px := *spec.Proxy
			px.Attach, px.Resolver = nil, ""
			spec.Proxy = &px
			want := *shown.spec
			want.Argv, want.Kind, want.Server = spec.Argv, spec.Kind, spec.Server
			if !reflect.DeepEqual(spec, want) {
				t.Errorf("exec's sandbox differs from sandbox show's:\nexec %+v\nshow %+v", spec, want)
			}
			got, err := backendlinux.Render(backend, &spec)
			if err != nil {
				t.Fatal(err)
			}
			if shownText, _ := backendlinux.Render(backend, &want); got != shownText {
				t.Errorf("rendered differently:\nexec %s\nshow %s", got, shownText)
			}
		})
	}
}

// reachableBinary lets plugin users reach this test binary, which plans use as
// the node binary bound into sandboxes (go test builds it in a private folder;
// an installed oz0-node is reachable), as exec and the node need on a root node.
func reachableBinary(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for dir := filepath.Dir(self); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			mode := fi.Mode().Perm()
			if err := os.Chmod(dir, mode|0o711); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, mode) })
		}
	}
}
