package backenddarwin

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"oz0.ai/node/internal/lazyre"
	"oz0.ai/node/node/manifest"
)

// Denial is one operation a plugin's sandbox refused, as the kernel logged it.
type Denial struct {
	Time    time.Time `json:"time"`
	Plugin  string    `json:"plugin"`
	Process string    `json:"process"` // the process name the kernel logs
	PID     int       `json:"pid"`
	// Operation is the Seatbelt operation: file-read-data, network-outbound,
	// mach-lookup, process-exec…
	Operation string `json:"operation"`
	// Target is the path, address, service or sysctl name ("" when the operation
	// names none). Process and Target are escaped (Go string syntax, unquoted).
	Target string `json:"target,omitempty"`
	// Count is how many times the kernel saw it before logging (deny(N)).
	Count int `json:"count"`
}

// LogPredicate selects the kernel's Seatbelt violation reports carrying this
// node's tag: the sender must be the Sandbox kernel extension (process 0), so no
// user process can add a line that passes.
const LogPredicate = `processID == 0 AND senderImagePath ENDSWITH "/Sandbox" AND eventMessage CONTAINS "` + Tag + `"`

// LogStreamArgs are the arguments of /usr/bin/log that follow the violations.
func LogStreamArgs() []string {
	return []string{"stream", "--style", "ndjson", "--level", "default", "--predicate", LogPredicate}
}

// logRecord is the part of a `log stream --style ndjson` record the parser reads.
type logRecord struct {
	EventMessage     string `json:"eventMessage"`
	ProcessID        int    `json:"processID"`
	SenderImagePath  string `json:"senderImagePath"`
	ProcessImagePath string `json:"processImagePath"`
	Timestamp        string `json:"timestamp"`
}

// violationRE is the kernel's report: "Sandbox: NAME(PID) deny(N) OPERATION [TARGET]".
// The name may hold spaces and parentheses; the target may hold anything.
var violationRE = lazyre.New(`(?s)^Sandbox: (.+)\((\d+)\) deny\((\d+)\) ([a-z0-9*-]+)(?: (.*))?$`)

// ParseDenial reads one line of `log stream --style ndjson`. ok is false for a
// line that is not a Seatbelt denial of one of this node's profiles reported by
// the kernel. The profile's message (Tag + plugin) is the report's last line:
// a target a plugin chose (a path with a newline and another plugin's tag in it)
// comes before it and cannot change whom the denial is counted against.
func ParseDenial(line []byte) (Denial, bool) {
	var r logRecord
	if err := json.Unmarshal(line, &r); err != nil {
		return Denial{}, false
	}
	if r.ProcessID != 0 || !strings.HasSuffix(r.SenderImagePath, "/Sandbox") {
		return Denial{}, false
	}
	body, tagLine, ok := cutLast(r.EventMessage, "\n")
	if !ok {
		return Denial{}, false
	}
	plugin, ok := strings.CutPrefix(strings.TrimSpace(tagLine), Tag)
	if !ok || !manifest.ValidName(plugin) {
		return Denial{}, false
	}
	m := violationRE.FindStringSubmatch(body)
	if m == nil {
		return Denial{}, false
	}
	pid, err := strconv.Atoi(m[2])
	if err != nil {
		return Denial{}, false
	}
	count, err := strconv.Atoi(m[3])
	if err != nil {
		return Denial{}, false
	}
	d := Denial{Plugin: plugin, Process: printable(m[1]), PID: pid, Count: count, Operation: m[4], Target: printable(m[5])}
	if t, err := time.Parse("2006-01-02 15:04:05.000000-0700", r.Timestamp); err == nil {
		d.Time = t
	}
	return d, true
}

// Hint is what the operator can do about d, when the node knows: a denied trust
// daemon is the one grant a profile leaves to the operator.
func (d Denial) Hint() string {
	if d.Operation == "mach-lookup" && d.Target == TrustDService {
		return "TLS through Security.framework needs " + TrustDService + ", which reaches the network outside the proxy; `oz0-node run --plugin-tls-trustd " + d.Plugin + "` grants it"
	}
	return ""
}

// printable escapes what a terminal would act on: a plugin chooses the paths
// and process names a report carries.
func printable(s string) string {
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// DenialLog keeps each plugin's most recent denials, newest first.
type DenialLog struct {
	mu   sync.Mutex
	max  int
	byPl map[string][]Denial
}

// NewDenialLog keeps up to max denials per plugin.
func NewDenialLog(max int) *DenialLog {
	return &DenialLog{max: max, byPl: map[string][]Denial{}}
}

// Add records d against its plugin.
func (l *DenialLog) Add(d Denial) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := append([]Denial{d}, l.byPl[d.Plugin]...)
	if len(r) > l.max {
		r = r[:l.max]
	}
	l.byPl[d.Plugin] = r
}

// Recent is plugin's denials, newest first.
func (l *DenialLog) Recent(plugin string) []Denial {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Denial(nil), l.byPl[plugin]...)
}
