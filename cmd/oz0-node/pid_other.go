//go:build !unix

package main

// pidAlive cannot probe a pid here: the health file is taken as written.
func pidAlive(int) bool { return true }
