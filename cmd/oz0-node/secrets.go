package main

import (
	"io"
	"strings"

	"oz0.ai/node/node/api"
)

// printSecrets lists a plugin's secrets as status and plugin show print them:
// who made each one, and per server where its value goes — never the value
// (docs/promises.md §17).
func printSecrets(w io.Writer, indent string, ss []api.SecretBinding) {
	for _, b := range ss {
		state := "set"
		if !b.Set {
			state = "not set"
		}
		by := map[string]string{"operator": "named by the operator", "manifest": "bound by the manifest",
			"sensitive": "sensitive in userConfig", "plain": "handed over plain by the operator"}[b.By]
		printf(w, "%ssecret %s (%s, %s)\n", indent, b.Key, by, state)
		if len(b.Uses) == 0 {
			printf(w, "%s  used by no server or hook\n", indent)
		}
		for _, u := range b.Uses {
			switch {
			case u.Holds != "":
				printf(w, "%s  %s holds the value itself: %s\n", indent, u.Where, u.Holds)
			case u.Sentinel == "":
				printf(w, "%s  %s: nothing to put in until it is set\n", indent, u.Where)
			default:
				where := "headers and the URL's query"
				if b.Body {
					where += ", and bodies"
				}
				printf(w, "%s  %s holds %s; the proxy puts the value in (%s) only for %s\n", indent, u.Where, u.Sentinel, where, hostList(u.Hosts))
			}
		}
	}
}

func hostList(hosts []string) string {
	if len(hosts) == 0 {
		return "no host (the server has no egress)"
	}
	return strings.Join(hosts, ", ")
}
