package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

// Beside a running node, exec and sandbox show decide with that node's run
// configuration, which its status carries typed: its exemption runs the plugin
// as the node's user with no sandbox, and a plugin it raised to gVisor is shown
// on gVisor, though neither command was given the flag.
func TestE2EExecAndShowDecideWithTheRunningNodesConfig(t *testing.T) {
	backends := backendsForE2E(t)
	args := []string{"--plugin-sandbox-exempt", "host-health"}
	gvisor := slices.Contains(backends, policy.BackendGVisor)
	if gvisor {
		args = append(args, "--plugin-backend", "demo="+policy.BackendGVisor)
	}
	n := newE2E(t, []string{"host-health", "demo"}, args...)
	n.waitState("host-health", "health", api.StateExemptRun)
	out, err := n.oz("exec", "host-health", "--", "id", "-u")
	if err != nil || strings.TrimSpace(out) != strconv.Itoa(os.Geteuid()) {
		t.Errorf("exec of the exempt plugin: %v, uid %q; want the node's uid %d", err, strings.TrimSpace(out), os.Geteuid())
	}
	if show, _ := n.oz("sandbox", "show", "host-health"); !strings.Contains(strings.SplitN(show, "\n", 2)[0], "on "+policy.BackendNone) {
		t.Errorf("sandbox show of the exempt plugin does not say it runs with no sandbox:\n%s", show)
	}
	if !gvisor {
		t.Log("gVisor does not work here: a plugin raised to it is not tested")
		return
	}
	n.waitState("demo", "main", api.StateRunning)
	if show, _ := n.oz("sandbox", "show", "demo"); !strings.Contains(strings.SplitN(show, "\n", 2)[0], "on "+policy.BackendGVisor) {
		t.Errorf("sandbox show of the plugin the node raised to gVisor:\n%s", show)
	}
}
