// Command extract-fixture writes one fixture plugin, whole (with the shared server),
// into a folder: `go run ./cmd/extract-fixture NAME DST`. The demo script uses it.
package main

import (
	"fmt"
	"os"

	"oz0.ai/node/fixtures"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: extract-fixture NAME DST")
		os.Exit(2)
	}
	if _, err := fixtures.Extract(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "extract-fixture:", err)
		os.Exit(1)
	}
}
