package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestSecretEqual(t *testing.T) {
	const tok = "Bearer 0123456789abcdef"
	for _, c := range []struct {
		got  string
		want bool
	}{{tok, true}, {"", false}, {"Bearer ", false}, {tok[:len(tok)-1], false}, {tok + "0", false}, {"bearer 0123456789abcdef", false}} {
		if SecretEqual(c.got, tok) != c.want {
			t.Errorf("SecretEqual(%q, token) = %v, want %v", c.got, !c.want, c.want)
		}
	}
}

// secretWord names an operand that holds a secret.
var secretWord = regexp.MustCompile(`(?i)token|secret|passw|authorization|credential`)

// Secrets are compared only with SecretEqual: a == or != on one returns as soon as
// a byte differs, so its timing tells an attacker how much of a guess was right.
// This reads the node's own sources (the bearer check lives in node/daemon) and
// fails on any such comparison other than a test for emptiness.
func TestSecretsAreNeverComparedWithEquals(t *testing.T) {
	var found int
	for _, dir := range []string{".", "../daemon", "../../cmd/oz0-node"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() && p != dir {
				if d != nil && d.IsDir() {
					return filepath.SkipDir
				}
				return err
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			found++
			ast.Inspect(f, func(n ast.Node) bool {
				b, ok := n.(*ast.BinaryExpr)
				if !ok || (b.Op != token.EQL && b.Op != token.NEQ) {
					return true
				}
				x, y := exprText(b.X), exprText(b.Y)
				if (secretWord.MatchString(x) || secretWord.MatchString(y)) && x != `""` && y != `""` && x != "nil" && y != "nil" {
					t.Errorf("%s: secret compared with %s: %s %s %s (use api.SecretEqual)", fset.Position(b.Pos()), b.Op, x, b.Op, y)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 10 {
		t.Fatalf("read only %d source files: the check proves nothing", found)
	}
}

// exprText is a compact rendering of an expression: identifiers, selectors, calls
// and literals, enough to tell what is compared.
func exprText(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name
	case *ast.BasicLit:
		return v.Value
	case *ast.SelectorExpr:
		return exprText(v.X) + "." + v.Sel.Name
	case *ast.CallExpr:
		var args []string
		for _, a := range v.Args {
			args = append(args, exprText(a))
		}
		return exprText(v.Fun) + "(" + strings.Join(args, ", ") + ")"
	case *ast.BinaryExpr:
		return exprText(v.X) + " " + v.Op.String() + " " + exprText(v.Y)
	case *ast.ParenExpr:
		return "(" + exprText(v.X) + ")"
	case *ast.IndexExpr:
		return exprText(v.X) + "[" + exprText(v.Index) + "]"
	case *ast.StarExpr:
		return "*" + exprText(v.X)
	case *ast.UnaryExpr:
		return v.Op.String() + exprText(v.X)
	}
	return "?"
}
