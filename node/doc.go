// Package node is the OS-neutral core of oz0-node. Its subpackages hold the code;
// this package holds only tests that keep the shape: the core's dependencies in
// bounds (deps_test.go: no sandbox backend, service or terminal UI below node/, and
// nothing but pure code under node/manifest and node/policy), and the documentation
// true to the tree (docs_test.go: the package map, links, the README's size).
package node
