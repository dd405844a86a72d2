package service

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"howett.net/plist"
)

// InstalledArgv reads the command line of the installed unit or plist, so status
// can find the node the service actually runs (its --data-dir).
func (in *Installer) InstalledArgv(s Spec) ([]string, error) {
	b, err := os.ReadFile(in.real(s.Path()))
	if err != nil {
		return nil, fmt.Errorf("read installed %s: %w", s.Path(), err)
	}
	if s.OS == Darwin {
		var job LaunchdJob
		if _, err := plist.Unmarshal(b, &job); err != nil {
			return nil, fmt.Errorf("read installed %s: %w", s.Path(), err)
		}
		return job.ProgramArguments, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			argv, err := SplitExecStart(v)
			if err != nil {
				return nil, fmt.Errorf("read installed %s: %w", s.Path(), err)
			}
			return argv, nil
		}
	}
	return nil, fmt.Errorf("read installed %s: no ExecStart line", s.Path())
}

// SplitExecStart splits an ExecStart value written by RenderSystemd back into its
// arguments (double quotes, backslash escapes inside them, %% and $$).
func SplitExecStart(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	quoted, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted, have = !quoted, true
		case c == '\\' && quoted:
			if i+1 >= len(line) {
				return nil, errors.New("ExecStart ends in a backslash")
			}
			i++
			cur.WriteByte(line[i])
		case (c == '%' || c == '$') && i+1 < len(line) && line[i+1] == c:
			i++
			cur.WriteByte(c)
		case c == '%' || c == '$':
			return nil, fmt.Errorf("ExecStart has an unescaped %c", c)
		case c == ' ' && !quoted:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if quoted {
		return nil, errors.New("ExecStart has an unterminated quote")
	}
	if have {
		args = append(args, cur.String())
	}
	return args, nil
}

// FlagValue returns the value after the last occurrence of flag in argv ("" if absent).
func FlagValue(argv []string, flag string) string {
	v := ""
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			v = argv[i+1]
		} else if after, ok := strings.CutPrefix(a, flag+"="); ok {
			v = after
		}
	}
	return v
}
