package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestRememberedToolAnswersWhyItsServerIsNotRunning(t *testing.T) {
	asked := ""
	g := New(Options{NotRunning: func(plugin, server string) string {
		asked = plugin + "/" + server
		if server == "up" {
			return "" // running, but no longer offers the tool
		}
		return "backing-off after 5 crashes"
	}})
	many := make([]string, 0, MaxRememberedTools+10)
	for i := range MaxRememberedTools + 10 {
		many = append(many, fmt.Sprintf("t%d", i))
	}
	if !g.Remember("p", "main", append(many, "bad name", "bad/name")) {
		t.Fatal("a new list is not a change")
	}
	if g.Remember("p", "main", append(many, "bad name")) {
		t.Error("the same list counted as a change")
	}
	got := g.Remembered("p")["main"]
	if len(got) != MaxRememberedTools {
		t.Errorf("remembered %d tools, want the bound %d", len(got), MaxRememberedTools)
	}
	for _, n := range got {
		if strings.Contains(n, " ") || strings.Contains(n, "/") {
			t.Errorf("invalid tool name remembered: %q", n)
		}
	}
	g.Remember("p", "up", []string{"gone"})

	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := g.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__t0"})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "not running: tool p__t0 is served by p/main, which is backing-off after 5 crashes") {
		t.Fatalf("call of a remembered tool: %v %+v", err, res)
	}
	// A server that runs but no longer offers the tool, and a tool never seen:
	// unknown, as before.
	for _, name := range []string{"p__gone", "p__never"} {
		asked = ""
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("call of %s: %v, want unknown tool", name, err)
		}
		if name == "p__gone" && asked != "p/up" {
			t.Errorf("call of %s asked about %q", name, asked)
		}
	}
	// A forgotten server's tools are unknown again.
	g.Remember("p", "main", nil)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__t0"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("call of a forgotten tool: %v", err)
	}
	if len(g.Remembered("p")) != 1 {
		t.Errorf("remembered after forgetting main: %v", g.Remembered("p"))
	}
}
