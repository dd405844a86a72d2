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
	r, err := Parse(Flags{
		DataDir:        "/var/lib/oz0-node",
		Mode:           "auto",
		Exempt:         []string{"a,b@ABCDEF0", "c"},
		Backend:        "gvisor",
		PluginBackends: []string{"x=gvisor,y=gvisor", "z=gvisor"},
		Labels:         []string{"zone=eu-1", "example.com/team=infra", "empty="},
		AllowCIDRs:     []string{"127.0.0.0/8", "fd00::/8"},
		MCPListen:      "[::1]:7777",
		MetricsListen:  "127.0.0.1:9464",
		HooksSee:       []string{"audit=demo,audit=notes", "audit=demo"},
		HooksProject:   []string{"lint,audit", "lint"},
		HooksApprove:   []string{"lint", "audit,lint"},
		HooksEgress:    []string{"audit"},
		NotifyRate:     500,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Run{
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
		"data dir NUL":           {Flags{DataDir: "/x\x00y"}, "--data-dir"},
		"data dir newline":       {Flags{DataDir: "/x\ny"}, "--data-dir"},
		"mode":                   {Flags{Mode: "loose"}, "--plugin-sandbox"},
		"hooks approve wildcard": {Flags{HooksApprove: []string{"*"}}, "--plugin-hooks-approve"},
		"hooks egress name":      {Flags{HooksEgress: []string{"Bad_Name"}}, "--plugin-hooks-egress"},
		"notify rate negative":   {Flags{NotifyRate: -1}, "--server-notify-rate"},
		"notify rate too high":   {Flags{NotifyRate: MaxNotifyRate + 1}, "--server-notify-rate"},
		"mode case":              {Flags{Mode: "Strict"}, "--plugin-sandbox"},
		"backend":                {Flags{Backend: "docker"}, "--backend"},
		"exempt name":            {Flags{Exempt: []string{"Bad_Name"}}, "--plugin-sandbox-exempt"},
		"exempt empty":           {Flags{Exempt: []string{"a,,b"}}, "--plugin-sandbox-exempt"},
		"exempt commit":          {Flags{Exempt: []string{"a@xyz"}}, "--plugin-sandbox-exempt"},
		"exempt short commit":    {Flags{Exempt: []string{"a@abc12"}}, "--plugin-sandbox-exempt"},
		"plugin backend form":    {Flags{PluginBackends: []string{"x"}}, "--plugin-backend"},
		"plugin backend name":    {Flags{PluginBackends: []string{"X=gvisor"}}, "--plugin-backend"},
		"plugin backend weaker":  {Flags{PluginBackends: []string{"x=bwrap"}}, "--plugin-backend"},
		"plugin backend empty":   {Flags{PluginBackends: []string{"x=gvisor,"}}, "--plugin-backend"},
		"label form":             {Flags{Labels: []string{"zone"}}, "--label"},
		"label key":              {Flags{Labels: []string{"-zone=a"}}, "--label"},
		"label key long":         {Flags{Labels: []string{strings.Repeat("k", 64) + "=a"}}, "--label"},
		"label derived":          {Flags{Labels: []string{"oz0.ai/tier=1"}}, "--label"},
		"label value":            {Flags{Labels: []string{"zone=a b"}}, "--label"},
		"label value long":       {Flags{Labels: []string{"zone=" + strings.Repeat("v", 64)}}, "--label"},
		"label twice":            {Flags{Labels: []string{"zone=a", "zone=b"}}, "--label"},
		"cidr":                   {Flags{AllowCIDRs: []string{"10.0.0.1"}}, "--egress-allow-cidr"},
		"cidr host bits":         {Flags{AllowCIDRs: []string{"10.0.0.1/8"}}, "--egress-allow-cidr"},
		"mcp listen public":      {Flags{MCPListen: "0.0.0.0:7777"}, "--mcp-listen"},
		"mcp listen no port":     {Flags{MCPListen: "127.0.0.1"}, "--mcp-listen"},
		"mcp listen port 0":      {Flags{MCPListen: "127.0.0.1:0"}, "--mcp-listen"},
		"mcp listen name":        {Flags{MCPListen: "localhost:7777"}, "--mcp-listen"},
		"metrics listen public":  {Flags{MetricsListen: "0.0.0.0:9464"}, "--metrics-listen"},
		"metrics listen lan":     {Flags{MetricsListen: "192.168.1.5:9464"}, "--metrics-listen"},
		"metrics listen name":    {Flags{MetricsListen: "localhost:9464"}, "--metrics-listen"},
		"metrics listen port 0":  {Flags{MetricsListen: "127.0.0.1:0"}, "--metrics-listen"},
		"hooks see form":         {Flags{HooksSee: []string{"audit"}}, "--plugin-hooks-see"},
		"hooks project name":     {Flags{HooksProject: []string{"*"}}, "--plugin-hooks-project"},
		"hooks see wildcard":     {Flags{HooksSee: []string{"audit=*"}}, "--plugin-hooks-see"},
		"hooks see name":         {Flags{HooksSee: []string{"Audit=demo"}}, "--plugin-hooks-see"},
		"hooks see itself":       {Flags{HooksSee: []string{"audit=audit"}}, "--plugin-hooks-see"},
		"hooks see empty":        {Flags{HooksSee: []string{"audit=demo,"}}, "--plugin-hooks-see"},
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
	if _, err := Parse(Flags{AllowCIDRs: []string{"10.0.0.1/8"}}); err == nil || !strings.Contains(err.Error(), "10.0.0.0/8") {
		t.Errorf("host-bits error %v does not suggest 10.0.0.0/8", err)
	}
}

func TestParseKeepsTheDataDirAsGiven(t *testing.T) {
	// Relative folders are refused where they matter (service units); run resolves
	// them against its working directory through datadir.New.
	for _, in := range []string{"rel/dir", "/a/b", ""} {
		r, err := Parse(Flags{DataDir: in})
		if err != nil || r.DataDir != in {
			t.Errorf("Parse(--data-dir %q): %q, %v", in, r.DataDir, err)
		}
	}
}

func TestParseMergesRepeatedValues(t *testing.T) {
	r, err := Parse(Flags{Exempt: []string{"a", "a", "a@abcdef0", "a@ABCDEF0"}, Labels: []string{"k=v", "k=v"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Exemptions) != 2 || len(r.Labels) != 1 {
		t.Errorf("%+v", r)
	}
}

// flagsFromArgs parses Args() output back into Flags, as the CLI's flag set would.
func flagsFromArgs(t *testing.T, args []string) Flags {
	t.Helper()
	var f Flags
	if len(args)%2 != 0 {
		t.Fatalf("odd argument list %q", args)
	}
	for i := 0; i < len(args); i += 2 {
		v := args[i+1]
		switch args[i] {
		case "--data-dir":
			f.DataDir = v
		case "--plugin-sandbox":
			f.Mode = v
		case "--backend":
			f.Backend = v
		case "--plugin-sandbox-exempt":
			f.Exempt = append(f.Exempt, v)
		case "--plugin-backend":
			f.PluginBackends = append(f.PluginBackends, v)
		case "--label":
			f.Labels = append(f.Labels, v)
		case "--egress-allow-cidr":
			f.AllowCIDRs = append(f.AllowCIDRs, v)
		case "--mcp-listen":
			f.MCPListen = v
		case "--metrics-listen":
			f.MetricsListen = v
		case "--plugin-hooks-see":
			f.HooksSee = append(f.HooksSee, v)
		case "--plugin-hooks-project":
			f.HooksProject = append(f.HooksProject, v)
		case "--plugin-hooks-approve":
			f.HooksApprove = append(f.HooksApprove, v)
		case "--plugin-hooks-egress":
			f.HooksEgress = append(f.HooksEgress, v)
		case "--plugin-tls-trustd":
			f.TrustD = append(f.TrustD, v)
		case "--server-notify-rate":
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("--server-notify-rate %q: %v", v, err)
			}
			f.NotifyRate = n
		default:
			t.Fatalf("unknown flag %q in %q", args[i], args)
		}
	}
	return f
}

// randomFlags builds valid flag values, in non-canonical spellings where the
// parser allows them (upper-case commits, comma lists, repeats).
func randomFlags(r *rand.Rand) Flags {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	name := func() string { return pick("a", "demo", "host-health", "x1", "own-sandbox") }
	hex := "0123456789abcdefABCDEF"
	var f Flags
	if r.IntN(2) == 0 {
		f.DataDir = pick("/var/lib/oz0-node", "/tmp/d d", "rel/dir", "/x=y")
	}
	f.Mode = pick("", "strict", "auto", "off")
	f.Backend = pick("", "auto", "bwrap", "gvisor", "none", "seatbelt")
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
		f.Exempt = append(f.Exempt, strings.Join(items, ","))
	}
	for range r.IntN(3) {
		f.PluginBackends = append(f.PluginBackends, name()+"=gvisor")
	}
	for range r.IntN(4) {
		f.Labels = append(f.Labels, pick("zone", "rack", "example.com/team", "Tier_2")+"="+pick("", "a", "eu-1", "x.y_z"))
	}
	for range r.IntN(3) {
		f.AllowCIDRs = append(f.AllowCIDRs, pick("127.0.0.0/8", "10.0.0.0/8", "fd00::/8", "192.168.1.0/24", "::1/128"))
	}
	for range r.IntN(3) {
		f.TrustD = append(f.TrustD, name()+","+name())
	}
	if r.IntN(2) == 0 {
		f.MCPListen = pick("127.0.0.1:7777", "[::1]:1", "127.0.0.2:65535", "[0:0::1]:80")
	}
	if r.IntN(2) == 0 {
		f.MetricsListen = pick("127.0.0.1:9464", "[::1]:9464")
	}
	if r.IntN(2) == 0 {
		f.NotifyRate = []int{0, 1, 200, MaxNotifyRate}[r.IntN(4)]
	}
	for range r.IntN(3) {
		if w, o := name(), name(); w != o {
			f.HooksSee = append(f.HooksSee, w+"="+o)
		}
	}
	for range r.IntN(3) {
		f.HooksApprove = append(f.HooksApprove, name()+","+name())
		f.HooksEgress = append(f.HooksEgress, name())
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
	r, err := Parse(Flags{DataDir: "/d", Mode: "off", Backend: "bwrap", Exempt: []string{"b", "a"},
		PluginBackends: []string{"z=gvisor", "y=gvisor"}, Labels: []string{"b=2", "a=1"}, AllowCIDRs: []string{"10.0.0.0/8"}, MCPListen: "127.0.0.1:7777",
		HooksSee: []string{"b=a", "a=b"}})
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
	r, err := Parse(Flags{TrustD: []string{"go-tool,rust-tool", "go-tool"}})
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
		if _, err := Parse(Flags{TrustD: []string{bad}}); err == nil || !strings.Contains(err.Error(), "--plugin-tls-trustd") {
			t.Errorf("--plugin-tls-trustd %q: %v, want an error naming the flag", bad, err)
		}
	}
}

// A running node's status carries its run configuration typed: what exec, sandbox
// show and plugin show read back is exactly what the flags produced, through the
// status JSON a client receives.
func TestStatusCarriesRunConfig(t *testing.T) {
	r, err := Parse(Flags{
		DataDir: "/var/lib/oz0-node", Mode: "auto", Exempt: []string{"a", "b@ABCDEF0"}, Backend: "gvisor",
		PluginBackends: []string{"x=gvisor"}, Labels: []string{"zone=eu-1"}, AllowCIDRs: []string{"10.0.0.0/8", "fd00::/8"},
		MCPListen: "127.0.0.1:7777", MetricsListen: "127.0.0.1:9464", HooksSee: []string{"audit=demo"},
		HooksProject: []string{"lint"}, TrustD: []string{"tls,cert"}, NotifyRate: 50,
	})
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
