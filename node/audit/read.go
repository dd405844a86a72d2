package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"oz0.ai/node/node/api"
)

// maxLine bounds a line a reader takes; longer ones are skipped.
const maxLine = 1 << 20

// Files are the stream's files that exist, oldest first: the rotated ones
// (<path>.N … <path>.1), then the live one.
func Files(path string) []string {
	matches, _ := filepath.Glob(path + ".*")
	type rotated struct {
		n    int
		path string
	}
	var rs []rotated
	for _, m := range matches {
		if n, err := strconv.Atoi(strings.TrimPrefix(m, path+".")); err == nil && n > 0 {
			rs = append(rs, rotated{n, m})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n })
	var out []string
	for _, r := range rs {
		out = append(out, r.path)
	}
	if _, err := os.Stat(path); err == nil {
		out = append(out, path)
	}
	return out
}

// Read hands every line of the stream, oldest first, to fn until it returns
// false; the line's bytes are as written. Lines that are no record are skipped.
func Read(path string, fn func(r api.AuditRecord, line []byte) bool) error {
	for _, p := range Files(path) {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // rotated away since it was listed
		}
		if err != nil {
			return fmt.Errorf("read audit stream: %w", err)
		}
		more, err := readLines(f, fn)
		f.Close()
		if err != nil {
			return fmt.Errorf("read audit stream %s: %w", p, err)
		}
		if !more {
			return nil
		}
	}
	return nil
}

func readLines(r io.Reader, fn func(api.AuditRecord, []byte) bool) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var rec api.AuditRecord
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Seq == 0 {
			continue
		}
		if !fn(rec, sc.Bytes()) {
			return false, nil
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return true, nil
	}
	return true, sc.Err()
}

// Last returns the stream's last n lines, oldest first, reading from the end of
// the live file and the newest rotated one.
func Last(path string, n int) ([]api.AuditRecord, error) {
	var out []api.AuditRecord
	for _, p := range []string{path, path + ".1"} {
		if len(out) >= n {
			break
		}
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read audit stream: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read audit stream: %w", err)
		}
		var got []api.AuditRecord
		var carry []byte
		err = backwards(f, st.Size(), func(off int64, chunk []byte) bool {
			buf := append(chunk, carry...)
			lines := bytes.Split(buf, []byte("\n"))
			start := 0
			if off > 0 {
				start, carry = 1, append([]byte(nil), lines[0]...)
			}
			for i := len(lines) - 1; i >= start; i-- {
				var r api.AuditRecord
				if json.Unmarshal(lines[i], &r) == nil && r.Seq > 0 {
					got = append(got, r)
				}
			}
			return len(out)+len(got) < n && len(carry) < maxLine
		})
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read audit stream %s: %w", p, err)
		}
		out = append(out, got...) // newest first so far
	}
	if len(out) > n {
		out = out[:n]
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Follow hands fn each line written to the live file from its current end on,
// across rotations, until ctx ends or fn returns false. It polls every interval.
func Follow(ctx context.Context, path string, interval time.Duration, fn func(r api.AuditRecord, line []byte) bool) error {
	var f *os.File
	var off int64
	var partial []byte
	open := func(fromEnd bool) {
		g, err := os.Open(path)
		if err != nil {
			return
		}
		f, off, partial = g, 0, nil
		if fromEnd {
			if st, err := g.Stat(); err == nil {
				off = st.Size()
			}
		}
	}
	open(true)
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	// drain reads f from off to its end; false when fn asked to stop.
	drain := func() bool {
		if f == nil {
			return true
		}
		buf := make([]byte, 64<<10)
		for {
			n, err := f.ReadAt(buf, off)
			off += int64(n)
			partial = append(partial, buf[:n]...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				line := partial[:i]
				partial = partial[i+1:]
				var r api.AuditRecord
				if json.Unmarshal(line, &r) == nil && r.Seq > 0 && !fn(r, line) {
					return false
				}
			}
			if len(partial) > maxLine {
				partial = nil
			}
			if n == 0 || err != nil {
				return true
			}
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if !drain() {
			return nil
		}
		// A rotation: what the old file got before it is read above; the new
		// one is read from its start.
		if st, err := os.Stat(path); err == nil {
			if f == nil {
				open(false)
				continue
			}
			if cur, err := f.Stat(); err == nil && !os.SameFile(st, cur) {
				if !drain() { // what it got between the last read and the rotation
					return nil
				}
				f.Close()
				f = nil
				open(false)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
