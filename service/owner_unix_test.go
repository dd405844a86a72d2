//go:build unix

package service

import (
	"os"
	"syscall"
	"testing"
)

func checkOwner(t *testing.T, path string, uid, gid uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("%s owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, uid, gid)
	}
}
