package daemon_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"oz0.ai/node/node/userconf"
)

// The per-call check's memo is not fooled by a configuration rewritten in place
// to the same size with its modification time put back (as `cp -p`, `touch -r`,
// an archive's restore or a second write within the clock's tick leave it): the
// required token taken away refuses the next call, as a fresh decision does.
func TestCallCheckMemoSeesARewriteThatKeepsSizeAndTime(t *testing.T) {
	n := needsConfigNode(t)
	file := userconf.File(n.d, "needs-config")
	cs := n.stdioClientWith(t, nil)
	for range 3 {
		if out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"}); isErr || out != "ok" {
			t.Fatalf("needs-config__echo: %q (error %v)", out, isErr)
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, same inode (written in place), same modification time.
	nb := bytes.Replace(b, []byte(`"api_token"`), []byte(`"api_tokeX"`), 1)
	if bytes.Equal(nb, b) {
		t.Fatalf("the configuration holds no api_token: %s", b)
	}
	if err := os.WriteFile(file, nb, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if fi2, err := os.Stat(file); err != nil || !os.SameFile(fi, fi2) || fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the rewrite changed the file's identity: %v", err)
	}
	pastMemoWindow()
	out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"})
	if !isErr || !strings.Contains(out, "refused") {
		t.Errorf("a call after the required token was taken away (size and time kept): %q (error %v); want a refusal", out, isErr)
	}
}
