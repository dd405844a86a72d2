package config

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/spf13/pflag"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

func TestParseDefaults(t *testing.T) {
	r, err := Parse(Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != policy.Strict || r.Backend != "auto" || len(r.Exemptions) != 0 || len(r.Labels) != 0 || r.MCPListen != "" {
		t.Errorf("defaults %+v", r)
	}
	if got := r.Args(); !reflect.DeepEqual(got, []string{"--plugin-sandbox", "strict"}) {
		t.Errorf("Args() = %q", got)
	}
}

func TestParseAccepts(t *testing.T) {
	r, err := Parse(Flags{"data-dir": {"/var/lib/oz0-node"}, "plugin-sandbox": {"auto"}, "plugin-sandbox-exempt": {"a,b@ABCDEF0", "c"}, "backend": {"gvisor"}, "plugin-backend": {"x=gvisor,y=gvisor", "z=gvisor"}, "label": {"zone=eu-1", "example.com/team=infra", "empty="}, "egress-allow-cidr": {"127.0.0.0/8", "fd00::/8"}, "mcp-listen": {"[::1]:7777"}, "metrics-listen": {"127.0.0.1:9464"}, "plugin-hooks-see": {"audit=demo,audit=notes", "audit=demo"}, "plugin-hooks-project": {"lint,audit", "lint"}, "plugin-hooks-approve": {"lint", "audit,lint"}, "plugin-hooks-egress": {"audit"}, "server-notify-rate": {strconv.Itoa(500)},
		"approval-wait": {"30s"}, "otlp-endpoint": {"http://127.0.0.1:4318"}})
	if err != nil {
		t.Fatal(err)
	}
	want := Run{
		ApprovalWait:   30 * time.Second,
		OTLPEndpoint:   "http://127.0.0.1:4318",
		DataDir:        "/var/lib/oz0-node",
		Mode:           policy.Auto,
		Exemptions:     []policy.Exemption{{Name: "a"}, {Name: "b", Commit: "abcdef0"}, {Name: "c"}},
		Backend:        "gvisor",
		PluginBackends: map[string]string{"x": "gvisor", "y": "gvisor", "z": "gvisor"},
		Labels:         map[string]string{"zone": "eu-1", "example.com/team": "infra", "empty": ""},
		AllowCIDRs:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
		MCPListen:      "[::1]:7777",
		MetricsListen:  "127.0.0.1:9464",
		HookGrants:     []policy.HookGrant{{Watcher: "audit", Other: "demo"}, {Watcher: "audit", Other: "notes"}},
		HookProject:    []string{"audit", "lint"},
		HookApprove:    []string{"audit", "lint"},
		HookEgress:     []string{"audit"},
		NotifyRate:     500,
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
}

func TestParseRejectsNamingTheFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		f    Flags
		flag string
	}{
		"data dir NUL":           {Flags{"data-dir": {"/x\x00y"}}, "--data-dir"},
		"data dir newline":       {Flags{"data-dir": {"/x\ny"}}, "--data-dir"},
		"mode":                   {Flags{"plugin-sandbox": {"loose"}}, "--plugin-sandbox"},
		"ro path relative":       {Flags{"plugin-ro-path": {"demo=opt/chrome"}}, "--plugin-ro-path"},
		"ro path root":           {Flags{"plugin-ro-path": {"demo=/"}}, "--plugin-ro-path"},
		"ro path data":           {Flags{"data-dir": {"/var/lib/oz0-node"}, "plugin-ro-path": {"demo=/var/lib"}}, "--plugin-ro-path"},
		"ro path proc":           {Flags{"plugin-ro-path": {"demo=/proc/1"}}, "--plugin-ro-path"},
		"ro path name":           {Flags{"plugin-ro-path": {"Demo=/opt"}}, "--plugin-ro-path"},
		"hooks approve wildcard": {Flags{"plugin-hooks-approve": {"*"}}, "--plugin-hooks-approve"},
		"hooks egress name":      {Flags{"plugin-hooks-egress": {"Bad_Name"}}, "--plugin-hooks-egress"},
		"notify rate negative":   {Flags{"server-notify-rate": {strconv.Itoa(-1)}}, "--server-notify-rate"},
		"notify rate too high":   {Flags{"server-notify-rate": {strconv.Itoa(MaxNotifyRate + 1)}}, "--server-notify-rate"},
		"mode case":              {Flags{"plugin-sandbox": {"Strict"}}, "--plugin-sandbox"},
		"backend":                {Flags{"backend": {"docker"}}, "--backend"},
		"exempt name":            {Flags{"plugin-sandbox-exempt": {"Bad_Name"}}, "--plugin-sandbox-exempt"},
		"exempt empty":           {Flags{"plugin-sandbox-exempt": {"a,,b"}}, "--plugin-sandbox-exempt"},
		"exempt commit":          {Flags{"plugin-sandbox-exempt": {"a@xyz"}}, "--plugin-sandbox-exempt"},
		"exempt short commit":    {Flags{"plugin-sandbox-exempt": {"a@abc12"}}, "--plugin-sandbox-exempt"},
		"plugin backend form":    {Flags{"plugin-backend": {"x"}}, "--plugin-backend"},
		"plugin backend name":    {Flags{"plugin-backend": {"X=gvisor"}}, "--plugin-backend"},
		"plugin backend weaker":  {Flags{"plugin-backend": {"x=bwrap"}}, "--plugin-backend"},
		"plugin backend empty":   {Flags{"plugin-backend": {"x=gvisor,"}}, "--plugin-backend"},
		"label form":             {Flags{"label": {"zone"}}, "--label"},
		"label key":              {Flags{"label": {"-zone=a"}}, "--label"},
		"label key long":         {Flags{"label": {strings.Repeat("k", 64) + "=a"}}, "--label"},
		"label derived":          {Flags{"label": {"oz0.ai/tier=1"}}, "--label"},
		"label value":            {Flags{"label": {"zone=a b"}}, "--label"},
		"label value long":       {Flags{"label": {"zone=" + strings.Repeat("v", 64)}}, "--label"},
		"label twice":            {Flags{"label": {"zone=a", "zone=b"}}, "--label"},
		"cidr":                   {Flags{"egress-allow-cidr": {"10.0.0.1"}}, "--egress-allow-cidr"},
		"cidr host bits":         {Flags{"egress-allow-cidr": {"10.0.0.1/8"}}, "--egress-allow-cidr"},
		"mcp listen public":      {Flags{"mcp-listen": {"0.0.0.0:7777"}}, "--mcp-listen"},
		"mcp listen no port":     {Flags{"mcp-listen": {"127.0.0.1"}}, "--mcp-listen"},
		"mcp listen port 0":      {Flags{"mcp-listen": {"127.0.0.1:0"}}, "--mcp-listen"},
		"mcp listen name":        {Flags{"mcp-listen": {"localhost:7777"}}, "--mcp-listen"},
		"metrics listen public":  {Flags{"metrics-listen": {"0.0.0.0:9464"}}, "--metrics-listen"},
		"metrics listen lan":     {Flags{"metrics-listen": {"192.168.1.5:9464"}}, "--metrics-listen"},
		"metrics listen name":    {Flags{"metrics-listen": {"localhost:9464"}}, "--metrics-listen"},
		"metrics listen port 0":  {Flags{"metrics-listen": {"127.0.0.1:0"}}, "--metrics-listen"},
		"hooks see form":         {Flags{"plugin-hooks-see": {"audit"}}, "--plugin-hooks-see"},
		"hooks project name":     {Flags{"plugin-hooks-project": {"*"}}, "--plugin-hooks-project"},
		"hooks see wildcard":     {Flags{"plugin-hooks-see": {"audit=*"}}, "--plugin-hooks-see"},
		"hooks see name":         {Flags{"plugin-hooks-see": {"Audit=demo"}}, "--plugin-hooks-see"},
		"hooks see itself":       {Flags{"plugin-hooks-see": {"audit=audit"}}, "--plugin-hooks-see"},
		"hooks see empty":        {Flags{"plugin-hooks-see": {"audit=demo,"}}, "--plugin-hooks-see"},
		"approval wait word":     {Flags{"approval-wait": {"soon"}}, "--approval-wait"},
		"approval wait negative": {Flags{"approval-wait": {"-1s"}}, "--approval-wait"},
		"approval wait long":     {Flags{"approval-wait": {"11m"}}, "--approval-wait"},
		"otlp no scheme":         {Flags{"otlp-endpoint": {"127.0.0.1:4318"}}, "--otlp-endpoint"},
		"otlp grpc scheme":       {Flags{"otlp-endpoint": {"grpc://127.0.0.1:4317"}}, "--otlp-endpoint"},
		"otlp credentials":       {Flags{"otlp-endpoint": {"https://user:secret@otel.example.com"}}, "--otlp-endpoint"},
		"otlp query":             {Flags{"otlp-endpoint": {"https://otel.example.com/?token=x"}}, "--otlp-endpoint"},
	} {
		_, err := Parse(tc.f)
		if err == nil {
			t.Errorf("%s: Parse(%+v) succeeded", name, tc.f)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.flag+" ") {
			t.Errorf("%s: error %q does not start with the flag %s", name, err, tc.flag)
		}
	}
	// The message suggests the fix for host bits.
	if _, err := Parse(Flags{"egress-allow-cidr": {"10.0.0.1/8"}}); err == nil || !strings.Contains(err.Error(), "10.0.0.0/8") {
		t.Errorf("host-bits error %v does not suggest 10.0.0.0/8", err)
	}
}

func TestParseKeepsTheDataDirAsGiven(t *testing.T) {
	// Relative folders are refused where they matter (service units); run resolves
	// them against its working directory through datadir.New.
	for _, in := range []string{"rel/dir", "/a/b", ""} {
		r, err := Parse(Flags{"data-dir": {in}})
		if err != nil || r.DataDir != in {
			t.Errorf("Parse(--data-dir %q): %q, %v", in, r.DataDir, err)
		}
	}
}

func TestParseMergesRepeatedValues(t *testing.T) {
	r, err := Parse(Flags{"plugin-sandbox-exempt": {"a", "a", "a@abcdef0", "a@ABCDEF0"}, "label": {"k=v", "k=v"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Exemptions) != 2 || len(r.Labels) != 1 {
		t.Errorf("%+v", r)
	}
}

// flagsFromArgs parses Args() output back into Flags with the run flags
// registered on a flag set, as the CLI's commands do (the global --data-dir
// beside them).
func flagsFromArgs(t *testing.T, args []string) Flags {
	t.Helper()
	f := Flags{}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	Register(fs, f)
	fs.Func("data-dir", "", func(v string) error { f["data-dir"] = []string{v}; return nil })
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("arguments left over in %q: %q", args, fs.Args())
	}
	return f
}

// randomFlags builds valid flag values, in non-canonical spellings where the
// parser allows them (upper-case commits, comma lists, repeats).
func randomFlags(r *rand.Rand) Flags {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	name := func() string { return pick("a", "demo", "host-health", "x1", "own-sandbox") }
	hex := "0123456789abcdefABCDEF"
	f := Flags{}
	if r.IntN(2) == 0 {
		f["data-dir"] = []string{pick("/var/lib/oz0-node", "/tmp/d d", "rel/dir", "/x=y")}
	}
	f["plugin-sandbox"] = []string{pick("", "strict", "auto", "off")}
	f["backend"] = []string{pick("", "auto", "bwrap", "gvisor", "none", "seatbelt")}
	for range r.IntN(4) {
		var items []string
		for range 1 + r.IntN(3) {
			it := name()
			if r.IntN(2) == 0 {
				var c strings.Builder
				for range 7 + r.IntN(34) {
					c.WriteByte(hex[r.IntN(len(hex))])
				}
				it += "@" + c.String()
			}
			items = append(items, it)
		}
		f["plugin-sandbox-exempt"] = append(f["plugin-sandbox-exempt"], strings.Join(items, ","))
	}
	for range r.IntN(3) {
		f["plugin-backend"] = append(f["plugin-backend"], name()+"=gvisor")
	}
	for range r.IntN(4) {
		f["label"] = append(f["label"], pick("zone", "rack", "example.com/team", "Tier_2")+"="+pick("", "a", "eu-1", "x.y_z"))
	}
	for range r.IntN(3) {
		f["egress-allow-cidr"] = append(f["egress-allow-cidr"], pick("127.0.0.0/8", "10.0.0.0/8", "fd00::/8", "192.168.1.0/24", "::1/128"))
	}
	for range r.IntN(3) {
		f["plugin-tls-trustd"] = append(f["plugin-tls-trustd"], name()+","+name())
	}
	if r.IntN(2) == 0 {
		f["mcp-listen"] = []string{pick("127.0.0.1:7777", "[::1]:1", "127.0.0.2:65535", "[0:0::1]:80")}
	}
	if r.IntN(2) == 0 {
		f["metrics-listen"] = []string{pick("127.0.0.1:9464", "[::1]:9464")}
	}
	if r.IntN(2) == 0 {
		f["server-notify-rate"] = []string{strconv.Itoa([]int{0, 1, 200, MaxNotifyRate}[r.IntN(4)])}
	}
	if r.IntN(2) == 0 {
		f["approval-wait"] = []string{pick("0s", "30s", "1m30s", "10m", "250ms")}
	}
	if r.IntN(2) == 0 {
		f["otlp-endpoint"] = []string{pick("http://127.0.0.1:4318", "https://otel.example.com/otlp", "http://[::1]:4317")}
	}
	for range r.IntN(3) {
		if w, o := name(), name(); w != o {
			f["plugin-hooks-see"] = append(f["plugin-hooks-see"], w+"="+o)
		}
	}
	for range r.IntN(3) {
		f["plugin-ro-path"] = append(f["plugin-ro-path"], name()+"="+pick("/opt/google/chrome", "/usr/share/fonts", "/srv/x y"))
	}
	for range r.IntN(3) {
		f["plugin-hooks-approve"] = append(f["plugin-hooks-approve"], name()+","+name())
		f["plugin-hooks-egress"] = append(f["plugin-hooks-egress"], name())
	}
	return f
}

func TestArgsRoundTripsThroughParse(t *testing.T) {
	prop := func(seed uint64) bool {
		f := randomFlags(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
		r1, err := Parse(f)
		if err != nil {
			// Labels given twice with different values are a legitimate refusal.
			return strings.HasPrefix(err.Error(), "--label")
		}
		args := r1.Args()
		r2, err := Parse(flagsFromArgs(t, args))
		if err != nil {
			t.Logf("flags %+v → args %q → %v", f, args, err)
			return false
		}
		if !reflect.DeepEqual(r1, r2) {
			t.Logf("flags %+v\n→ %+v\n→ args %q\n→ %+v", f, r1, args, r2)
			return false
		}
		if again := r2.Args(); !reflect.DeepEqual(again, args) {
			t.Logf("args not canonical: %q then %q", args, again)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 2000}); err != nil {
		t.Error(err)
	}
}

func TestArgsOrderIsFixed(t *testing.T) {
	r, err := Parse(Flags{"data-dir": {"/d"}, "plugin-sandbox": {"off"}, "backend": {"bwrap"}, "plugin-sandbox-exempt": {"b", "a"}, "plugin-backend": {"z=gvisor", "y=gvisor"}, "label": {"b=2", "a=1"}, "egress-allow-cidr": {"10.0.0.0/8"}, "mcp-listen": {"127.0.0.1:7777"}, "plugin-hooks-see": {"b=a", "a=b"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--data-dir", "/d", "--plugin-sandbox", "off", "--backend", "bwrap",
		"--plugin-sandbox-exempt", "b", "--plugin-sandbox-exempt", "a",
		"--plugin-backend", "y=gvisor", "--plugin-backend", "z=gvisor",
		"--label", "a=1", "--label", "b=2", "--egress-allow-cidr", "10.0.0.0/8", "--mcp-listen", "127.0.0.1:7777",
		"--plugin-hooks-see", "b=a", "--plugin-hooks-see", "a=b"}
	if got := r.Args(); !reflect.DeepEqual(got, want) {
		t.Errorf("Args()\n got %q\nwant %q", got, want)
	}
}

// trustd is granted per plugin by name, never by pattern, and survives the trip
// through a service's argument list.
func TestTrustDGrant(t *testing.T) {
	r, err := Parse(Flags{"plugin-tls-trustd": {"go-tool,rust-tool", "go-tool"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"go-tool", "rust-tool"}; !reflect.DeepEqual(r.TrustD, want) {
		t.Errorf("TrustD = %q, want %q", r.TrustD, want)
	}
	if got := r.Args(); !slices.Contains(got, "--plugin-tls-trustd") {
		t.Errorf("Args() = %q lacks the grant", got)
	}
	for _, bad := range []string{"*", "Go_Tool", "", "a b", "../x"} {
		if _, err := Parse(Flags{"plugin-tls-trustd": {bad}}); err == nil || !strings.Contains(err.Error(), "--plugin-tls-trustd") {
			t.Errorf("--plugin-tls-trustd %q: %v, want an error naming the flag", bad, err)
		}
	}
}

// A running node's status carries its run configuration typed: what exec, sandbox
// show and plugin show read back is exactly what the flags produced, through the
// status JSON a client receives.
func TestStatusCarriesRunConfig(t *testing.T) {
	r, err := Parse(Flags{"data-dir": {"/var/lib/oz0-node"}, "plugin-sandbox": {"auto"}, "plugin-sandbox-exempt": {"a", "b@ABCDEF0"}, "backend": {"gvisor"}, "plugin-backend": {"x=gvisor"}, "label": {"zone=eu-1"}, "egress-allow-cidr": {"10.0.0.0/8", "fd00::/8"}, "mcp-listen": {"127.0.0.1:7777"}, "metrics-listen": {"127.0.0.1:9464"}, "plugin-hooks-see": {"audit=demo"}, "plugin-hooks-project": {"lint"}, "plugin-tls-trustd": {"tls,cert"}, "server-notify-rate": {strconv.Itoa(50)}})
	if err != nil {
		t.Fatal(err)
	}
	st := &api.Status{Node: api.NodeInfo{Run: r.InStatus()}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back api.Status
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got, ok := FromStatus(&back)
	if !ok {
		t.Fatalf("status %s carries no run configuration", b)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip through status:\ngot  %+v\nwant %+v", got, r)
	}
	if !reflect.DeepEqual(got.Args(), r.Args()) {
		t.Errorf("flags differ after the round trip: %q, want %q", got.Args(), r.Args())
	}
	for _, st := range []*api.Status{nil, {}, {Node: api.NodeInfo{Run: json.RawMessage(`"strict"`)}}} {
		if _, ok := FromStatus(st); ok {
			t.Errorf("FromStatus(%+v) claims a run configuration", st)
		}
	}
}
