package manifest

import (
	"fmt"
	"slices"
	"sort"

	"oz0.ai/node/node/netrule"
)

// SecretBinding is what a manifest says of one secret under
// extensions."ai.oz0".secrets.KEY (KEY is a userConfig key or a ${VAR} name):
// where the node's egress proxy puts its value in. The tool only ever holds a
// sentinel (docs/promises.md §17). Naming a key here makes it a secret even when
// userConfig does not mark it sensitive; a binding can only narrow.
type SecretBinding struct {
	// Hosts narrow where the value is put in (host patterns as in egress; a port
	// may follow ":"); none: every host the server's egress allows.
	Hosts []string `json:"hosts,omitempty"`
	// Body puts the value into request bodies too, not only headers and the
	// URL's query.
	Body   bool   `json:"body,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// SecretKeys returns the keys the manifest binds, sorted.
func (m *Manifest) SecretKeys() []string {
	keys := make([]string, 0, len(m.Secrets))
	for k := range m.Secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// secrets reads extensions."ai.oz0".secrets.
func (w walker) secrets(v any, field string) map[string]SecretBinding {
	o, ok := v.(map[string]any)
	if !ok {
		w.typeErr(field, "an object of secrets by key ({\"api_key\": {\"hosts\": [\"api.example.com\"]}})")
		return nil
	}
	out := map[string]SecretBinding{}
	for key, bv := range o {
		f := field + "." + key
		if !configKeyRE.MatchString(key) {
			w.c.add(w.file, f, "a secret's key is a userConfig key or a ${VAR} name: letters, digits and '_'")
			continue
		}
		bo, ok := bv.(map[string]any)
		if !ok {
			w.typeErr(f, "an object {hosts, body, reason}")
			continue
		}
		w.unknownKeys(bo, f, "hosts", "body", "reason")
		b := SecretBinding{Reason: w.strAt(bo, f, "reason", false)}
		if hv, ok := bo["hosts"]; ok {
			hosts := w.strings(hv, f+".hosts")
			if len(hosts) == 0 {
				w.c.add(w.file, f+".hosts", "names no host; leave it out to bind the secret to the server's egress hosts")
			}
			for i, h := range hosts {
				p, err := netrule.ParsePattern(h)
				if err != nil {
					w.c.add(w.file, fmt.Sprintf("%s.hosts[%d]", f, i), "%v", err)
					continue
				}
				if !slices.Contains(b.Hosts, p.String()) {
					b.Hosts = append(b.Hosts, p.String())
				}
			}
		}
		if bv, ok := bo["body"]; ok {
			if b.Body, ok = bv.(bool); !ok {
				w.typeErr(f+".body", "true or false")
			}
		}
		out[key] = b
	}
	return out
}
