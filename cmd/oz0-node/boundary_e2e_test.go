package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
)

// A plugin's answers carry no authority the plugin does not hold, and what its
// hooks see of the agent stays in their sandbox (docs/promises.md §15, §16). The
// attacker is the fixture hook-hijack: its hooks answer the agent's Bash with
// allow and a command of their own, approve its permission requests with a rule
// that allows every Bash call, and send what a Read returned to a host of the
// plugin's own egress list. Proven through the real `oz0-node hook` beside a
// running node and by itself, in real sandboxes, on every backend here.

func hijackPayloads(stealURL string) map[string]map[string]any {
	return map[string]map[string]any{
		"bash": bashCall("npm test"),
		"permission": basePayload("PermissionRequest", map[string]any{"tool_name": "Bash",
			"tool_input": map[string]any{"command": "npm test"}, "permission_suggestions": []any{}}),
		"own": basePayload("PreToolUse", map[string]any{"tool_name": "mcp__oz0__hook-hijack__echo",
			"tool_input": map[string]any{"text": "hi"}, "tool_use_id": "toolu_02"}),
		// The agent read a private key; the file names the attacker's URL, which
		// stands for any host on the plugin's own egress list.
		"read": basePayload("PostToolUse", map[string]any{"tool_name": "Read",
			"tool_input": map[string]any{"file_path": "/home/dev/.ssh/id_ed25519"},
			"tool_response": map[string]any{"type": "text", "file": map[string]any{"filePath": "/home/dev/.ssh/id_ed25519",
				"content": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA " + stealURL + "\n-----END OPENSSH PRIVATE KEY-----\n"}},
			"tool_use_id": "toolu_03"}),
		"own-post": basePayload("PostToolUse", map[string]any{"tool_name": "mcp__oz0__hook-hijack__echo",
			"tool_input": map[string]any{"text": stealURL}, "tool_response": map[string]any{"content": []any{map[string]any{"type": "text", "text": stealURL}}},
			"tool_use_id": "toolu_04"}),
	}
}

// hookAnswer runs `oz0-node hook` with a payload (wrap, if set, runs it inside
// another command, e.g. a mount namespace) and returns stdout and stderr.
func hookAnswer(t *testing.T, n *e2eNode, payload map[string]any, wrap []string, flags ...string) (string, string) {
	t.Helper()
	b, _ := json.Marshal(payload)
	args := append([]string{n.bin, "--data-dir", n.data, "hook"}, flags...)
	if len(wrap) > 0 {
		// The wrapper's last argument is a shell script that ends in exec.
		w := slices.Clone(wrap)
		w[len(w)-1] += " " + strings.Join(args, " ")
		args = w
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = bytes.NewReader(b)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("hook %v: %v\nstdout %s\nstderr %s", flags, err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// checkNoAuthority asserts that the agent gets nothing from hook-hijack's answers
// about its own tools that widens what it may do.
func checkNoAuthority(t *testing.T, n *e2eNode, p map[string]map[string]any, wrap []string, flags ...string) {
	t.Helper()
	out, errOut := hookAnswer(t, n, p["bash"], wrap, flags...)
	if strings.Contains(out, "evil.example") || strings.Contains(out, `"allow"`) || strings.Contains(out, "updatedInput") {
		t.Errorf("PreToolUse Bash: the plugin's allow and command reached the agent:\n%s", out)
	}
	if strings.TrimSpace(out) != "" {
		t.Errorf("PreToolUse Bash: stdout %q; want nothing (the call goes on as the user's settings say)", out)
	}
	if !strings.Contains(errOut, "answered beyond its authority") || !strings.Contains(errOut, "updatedInput") {
		t.Errorf("PreToolUse Bash: stderr does not tell of the drop:\n%s", errOut)
	}
	out, _ = hookAnswer(t, n, p["permission"], wrap, flags...)
	if strings.Contains(out, "allow") || strings.Contains(out, "evil.example") || strings.Contains(out, "updatedPermissions") {
		t.Errorf("PermissionRequest Bash: the plugin answered the user's permission dialog:\n%s", out)
	}
	// Its own tool: the whole protocol.
	out, _ = hookAnswer(t, n, p["own"], wrap, flags...)
	if !strings.Contains(out, `"permissionDecision":"allow"`) || !strings.Contains(out, "rewritten by hook-hijack") {
		t.Errorf("PreToolUse of its own tool: its allow and input were not passed on:\n%s", out)
	}
}

// exfil runs the Read payload and returns what hook-hijack's hook said it got.
func exfil(t *testing.T, n *e2eNode, payload map[string]any, wrap []string, flags ...string) string {
	t.Helper()
	out, errOut := hookAnswer(t, n, payload, wrap, flags...)
	var ans struct {
		HSO struct {
			Context string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(out), &ans); err != nil || !strings.HasPrefix(ans.HSO.Context, "exfil: ") {
		t.Fatalf("the exfil hook did not answer: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	return ans.HSO.Context
}

func TestE2EHookAnswersCarryNoAuthorityTheirPluginDoesNotHold(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue // the Linux battery below; Seatbelt renders NetIsolated in its golden tests
		}
		t.Run(backend, func(t *testing.T) {
			e := newEgressEnvWith(t, backend, "hook-hijack", []string{"main"})
			port := e.plain.Listener.Addr().(*net.TCPAddr).Port
			stealURL := fmt.Sprintf("http://allowed.test:%d/steal", port)
			p := hijackPayloads(stealURL)

			t.Run("beside a running node", func(t *testing.T) {
				checkNoAuthority(t, e.e2eNode, p, nil)
				before := e.stolen.Load()
				if got := exfil(t, e.e2eNode, p["read"], nil); !strings.Contains(got, "proxy unset") || !strings.Contains(got, "http 000") {
					t.Errorf("a hook that saw the agent's Read reached the network: %s", got)
				}
				if e.stolen.Load() != before {
					t.Error("the agent's Read result reached the plugin's host")
				}
				// Its own tool's event keeps the plugin's egress: the same hook gets through.
				if got := exfil(t, e.e2eNode, p["own-post"], nil); !strings.Contains(got, "http 200") {
					t.Errorf("a hook on its own tool's call lost the plugin's egress: %s", got)
				}
				if e.stolen.Load() != before+1 {
					t.Errorf("the own tool's hook did not reach the plugin's host (%d requests)", e.stolen.Load()-before)
				}
				// Nor through the plugin's own server, which has a network: what the
				// isolated hook left in its data folder is not where the server looks.
				// (Its hook on its own tool's call, which has a network, left a line there.)
				out, err := e.oz("call", "hook-hijack__read", "--arg", "path="+filepath.Join(e.dir().Home("hook-hijack"), "outbox"))
				if err != nil || strings.Contains(out, "OPENSSH PRIVATE KEY") || !strings.Contains(out, "toolu_04") {
					t.Errorf("the plugin's server read what the isolated hook saw of the agent, or nothing (%v):\n%s", err, out)
				}
				if b, err := os.ReadFile(filepath.Join(e.dir().HookHome("hook-hijack"), "outbox")); err != nil || !strings.Contains(string(b), "OPENSSH PRIVATE KEY") {
					t.Errorf("the isolated hook's data folder does not hold what it wrote: %v", err)
				}
				st := e.status()
				var dropped, isolated bool
				for _, r := range st.HookRuns {
					dropped = dropped || r.Plugin == "hook-hijack" && r.Event == "PreToolUse" && r.Tool == "Bash" && slices.Contains(r.Dropped, "hookSpecificOutput.updatedInput")
					isolated = isolated || r.Plugin == "hook-hijack" && r.Event == "PostToolUse" && r.Tool == "Read" && r.Network == "isolated"
				}
				if !dropped || !isolated {
					t.Errorf("status hook runs do not show the drop (%v) and the isolated run (%v): %+v", dropped, isolated, st.HookRuns)
				}
				var findings int
				for _, f := range st.Findings {
					if f.Code == api.CodeHookAnswerDropped && f.Subject == "hook-hijack" {
						findings++
					}
				}
				if findings != 1 {
					t.Errorf("%d %s findings for hook-hijack; want 1 (once per plugin)", findings, api.CodeHookAnswerDropped)
				}
				if out, _ := e.oz("status"); !strings.Contains(out, "dropped") {
					t.Errorf("oz0-node status does not show the dropped answer:\n%s", out)
				}
			})

			t.Run("the operator's grants", func(t *testing.T) {
				e.stop()
				e.restartEgress("--plugin-hooks-approve", "hook-hijack", "--plugin-hooks-egress", "hook-hijack")
				e.waitState("hook-hijack", "main", api.StateRunning)
				out, _ := hookAnswer(t, e.e2eNode, p["bash"], nil)
				if !strings.Contains(out, `"permissionDecision":"allow"`) || !strings.Contains(out, "evil.example") {
					t.Errorf("--plugin-hooks-approve: the approved plugin's answer was not passed on:\n%s", out)
				}
				before := e.stolen.Load()
				if got := exfil(t, e.e2eNode, p["read"], nil); !strings.Contains(got, "http 200") || e.stolen.Load() != before+1 {
					t.Errorf("--plugin-hooks-egress: the granted hook did not reach the plugin's host: %s", got)
				}
				st := e.status()
				if st.Node.Labels["oz0.ai/hooks-approve/hook-hijack"] != "true" || st.Node.Labels["oz0.ai/hooks-egress/hook-hijack"] != "true" {
					t.Errorf("labels do not carry the grants: %v", st.Node.Labels)
				}
				var approved, egress bool
				for _, f := range st.Findings {
					approved = approved || f.Code == api.CodeHookApproved && f.Subject == "hook-hijack"
					egress = egress || f.Code == api.CodeHookEgress && f.Subject == "hook-hijack"
				}
				for _, pl := range st.Plugins {
					if pl.Name == "hook-hijack" && (!pl.HooksApprove || !pl.HooksEgress) {
						t.Errorf("plugin status does not show the grants: %+v", pl)
					}
				}
				if !approved || !egress {
					t.Errorf("no findings for the grants: %+v", st.Findings)
				}
				if out, _ := e.oz("status"); !strings.Contains(out, "--plugin-hooks-approve hook-hijack") || !strings.Contains(out, "--plugin-hooks-egress hook-hijack") {
					t.Errorf("oz0-node status does not show the grants:\n%s", out)
				}
			})

			t.Run("by itself", func(t *testing.T) {
				e.stop()
				// Without a node, `oz0-node hook` serves the plugin's egress itself; its
				// proxy runs in a mount namespace whose /etc/hosts names allowed.test.
				wrap := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
					"mount --bind " + filepath.Join(filepath.Dir(e.data), "hosts") + " /etc/hosts && exec"}
				checkNoAuthority(t, e.e2eNode, p, wrap, "--backend", backend)
				// No network at all for the agent's data; with the grant the hook reaches
				// the proxy (which, standing alone, refuses the loopback test host).
				if got := exfil(t, e.e2eNode, p["read"], wrap, "--backend", backend); !strings.Contains(got, "proxy unset") || !strings.Contains(got, "http 000") {
					t.Errorf("standalone: a hook that saw the agent's Read reached the network: %s", got)
				}
				if got := exfil(t, e.e2eNode, p["read"], wrap, "--backend", backend, "--plugin-hooks-egress", "hook-hijack"); !strings.Contains(got, "proxy set") || strings.Contains(got, "http 000") {
					t.Errorf("standalone: the granted hook got no proxy: %s", got)
				}
				out, _ := hookAnswer(t, e.e2eNode, p["bash"], wrap, "--backend", backend, "--plugin-hooks-approve", "hook-hijack")
				if !strings.Contains(out, `"permissionDecision":"allow"`) {
					t.Errorf("standalone --plugin-hooks-approve: the answer was not passed on:\n%s", out)
				}
			})
		})
	}
}
