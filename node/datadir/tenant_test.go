package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/toolrule"
)

func TestReadToolRules(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tools")
	if rs, _ := ReadToolRules(p); !rs.Missing || rs.Err != nil || !rs.Decide("a__b", toolrule.Hints{}).Allow {
		t.Fatalf("a missing file: %+v", rs)
	}
	os.WriteFile(p, []byte("deny a__*\nallow b__c\n"), 0o600)
	rs, raw := ReadToolRules(p)
	if rs.Err != nil || len(rs.Rules) != 2 || len(raw) == 0 {
		t.Fatalf("%+v", rs)
	}
	os.WriteFile(p, []byte("allow b__c\nallow nope\n"), 0o600)
	if rs, _ := ReadToolRules(p); rs.Err == nil || !strings.Contains(rs.Err.Error(), "line 2") {
		t.Fatalf("a broken file: %+v", rs)
	}
}

func TestAppendTenantLine(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "kept", "egress")
	os.MkdirAll(filepath.Dir(elsewhere), 0o700)
	os.WriteFile(elsewhere, []byte("api.example.com"), 0o644) // no newline at its end
	link := filepath.Join(dir, "tenant", "egress")
	os.MkdirAll(filepath.Dir(link), 0o700)
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if err := AppendTenantLine(link, "allowed always by root via tui", "cdn.example.com:443", 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(link)
	if string(b) != "api.example.com\n# allowed always by root via tui\ncdn.example.com:443\n" {
		t.Fatalf("got %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the link was replaced by a file")
	}
	if fi, _ := os.Stat(elsewhere); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v: the file's own mode was not kept", fi.Mode())
	}
	if err := AppendTenantLine(link, "x\ny", "z", 0o600); err == nil {
		t.Fatal("a comment with a line break was written")
	}
	fresh := filepath.Join(dir, "tenant", "tools")
	if err := AppendTenantLine(fresh, "c", "allow a__b", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o600 {
		t.Fatalf("a new file: mode %v", fi.Mode())
	}
}
