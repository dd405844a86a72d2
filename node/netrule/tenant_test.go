package netrule

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseTenantList(t *testing.T) {
	ps, lines, err := ParseTenantList(strings.NewReader("# comment\n\n  API.example.com  \n.example.org:443 # why\r\n[2606:4700::1]:443\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != "api.example.com .example.org:443 [2606:4700::1]:443" || len(lines) != 3 || lines[0] != 3 || lines[2] != 5 {
		t.Fatalf("got %q lines %v", got, lines)
	}
	for in, line := range map[string]string{
		"ok.example.com\n*.example.com\n":        "line 2",
		"ok.example.com\n\n.com\n":               "line 3",
		"127.0.0.1\n":                            "line 1",
		"localhost\n":                            "line 1",
		"a.example.com:99999\n":                  "line 1",
		"a b.example.com\n":                      "line 1",
		string(bytes.Repeat([]byte("a"), 2<<20)): "longer than",
	} {
		_, _, err := ParseTenantList(strings.NewReader(in), "tenant/egress")
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("%.30q: %v, want an error naming %q", in, err, line)
		}
	}
}
