package userconf

import (
	"os"
	"path/filepath"
	"testing"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/manifest"
)

// Values are private to the node's user (folder 0700, file 0600), read back as
// written, and an empty set leaves no file.
func TestValuesArePrivateAndRoundTrip(t *testing.T) {
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Load(d, "p"); err != nil || len(v) != 0 {
		t.Fatalf("nothing set: %v %v", v, err)
	}
	if err := Save(d, "p", Values{"token": "s3cret", "PORT": "8443"}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{Folder(d): 0o700, File(d, "p"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	v, err := Load(d, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := v.Lookup("user_config.token"); !ok || got != "s3cret" {
		t.Errorf("user_config.token = %q %v", got, ok)
	}
	if got, ok := v.Lookup("PORT"); !ok || got != "8443" {
		t.Errorf("PORT = %q %v", got, ok)
	}
	if _, ok := v.Lookup("HOME"); ok {
		t.Error("a name never set has a value")
	}
	if err := Save(d, "p", Values{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(File(d, "p")); !os.IsNotExist(err) {
		t.Errorf("empty set left a file: %v", err)
	}
	for _, bad := range []string{"", "..", "a/b", `a\b`} {
		if err := Save(d, bad, Values{"k": "v"}); err == nil {
			t.Errorf("plugin name %q accepted", bad)
		}
	}
}

// Only a declared key not marked sensitive may be shown; every other value is
// treated as a secret.
func TestOnlyPublicDeclaredKeysAreShown(t *testing.T) {
	m := &manifest.Manifest{UserConfig: map[string]manifest.UserConfigOption{
		"region": {Key: "region"}, "token": {Key: "token", Sensitive: true},
	}}
	for name, want := range map[string]bool{
		"user_config.region": true, "region": true, "user_config.token": false, "token": false,
		"API_KEY": false, "user_config.undeclared": false,
	} {
		if got := Public(m, name); got != want {
			t.Errorf("Public(%s) = %v, want %v", name, got, want)
		}
	}
}

// Marks round-trip beside the values; a file of values alone keeps the first
// layout (and is read as before); what makes a key a secret, and --plain.
func TestMarksRoundTripAndDecideWhatIsSecret(t *testing.T) {
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(d, "p", Values{"token": "s3cret"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(File(d, "p")); string(b) != "{\n  \"token\": \"s3cret\"\n}\n" {
		t.Errorf("values alone written as %q", b)
	}
	c := Config{Values: Values{"token": "s3cret", "LEVEL": "gold", "region": "eu"}, Secret: []string{"LEVEL", "LEVEL"}, Plain: []string{"token"}}
	if err := SaveConfig(d, "p", c); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(d, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got.Values["token"] != "s3cret" || len(got.Secret) != 1 || got.Secret[0] != "LEVEL" || len(got.Plain) != 1 {
		t.Errorf("read back %+v", got)
	}
	if err := Save(d, "p", Values{"token": "new"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadConfig(d, "p"); len(got.Secret) != 1 || got.Values["token"] != "new" {
		t.Errorf("Save lost the marks: %+v", got)
	}
	m := &manifest.Manifest{
		UserConfig: map[string]manifest.UserConfigOption{"token": {Key: "token", Sensitive: true}, "region": {Key: "region"}},
		Secrets:    map[string]manifest.SecretBinding{"API": {}},
	}
	for key, want := range map[string]string{"token": "plain", "user_config.token": "plain", "LEVEL": "operator", "API": "manifest", "region": "", "OTHER": ""} {
		if by := got.SecretBy(m, key); by != want {
			t.Errorf("SecretBy(%s) = %q, want %q", key, by, want)
		}
		if got.IsSecret(m, key) != (want != "" && want != "plain") {
			t.Errorf("IsSecret(%s) = %v", key, got.IsSecret(m, key))
		}
	}
}
