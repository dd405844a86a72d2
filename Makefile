# The two commands a newcomer needs: `make demo` (the node on its bundled fixture
# plugins, with its TUI) and `make test` (what CI runs). `make bench` prints the
# side-by-side performance table.
.PHONY: demo test bench build clean

build:
	go build -o bin/oz0-node ./cmd/oz0-node

demo:
	scripts/demo

test:
	scripts/test

bench:
	scripts/bench

clean:
	rm -rf bin demo
