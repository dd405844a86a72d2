package policy

import (
	"testing"

	"oz0.ai/node/node/manifest"
)

// FuzzDecide checks the promises that must hold whatever the inputs.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(1), uint8(0xff), uint8(0), []byte{0, 1, 2}, commit)
	f.Add(uint8(1), uint8(1), uint8(0), uint8(0x04), uint8(3), []byte{1}, "")
	f.Add(uint8(2), uint8(0), uint8(1), uint8(0x07), uint8(5), []byte{2, 2}, "ABCDEF0123")
	f.Fuzz(func(t *testing.T, mode, osb, tier, flags, exb uint8, kinds []byte, inCommit string) {
		m := &manifest.Manifest{Name: "fz"}
		kindOf := []manifest.SandboxKind{manifest.SandboxDefault, manifest.SandboxHost, manifest.SandboxOwn}
		for i, k := range kinds {
			if i >= 8 {
				break
			}
			m.Servers = append(m.Servers, manifest.Server{Name: string(rune('a' + i)), Command: "x", Sandbox: kindOf[int(k)%3]})
		}
		m.Hooks = []manifest.Hook{{Event: "Stop", Command: "x"}}
		if flags&0x80 != 0 {
			m.Isolation = manifest.IsolationGVisor
		}
		in := Inputs{
			Manifest:           m,
			Commit:             inCommit,
			Mode:               []Mode{Strict, Auto, Off}[int(mode)%3],
			OS:                 []string{"linux", "darwin"}[int(osb)%2],
			Tier:               int(tier % 2),
			Backend:            []string{BackendBwrap, BackendGVisor, BackendSeatbelt, BackendNone}[int(tier/2)%4],
			GVisor:             flags&0x01 != 0,
			Root:               flags&0x02 != 0,
			DataDirTraversable: flags&0x04 != 0,
			Private:            flags&0x08 != 0,
		}
		if flags&0x10 != 0 {
			in.UserUnreachable = "unreachable"
		}
		if flags&0x20 != 0 {
			in.UIDCollision = "other"
		}
		if flags&0x40 != 0 {
			in.PluginBackend = BackendGVisor
		}
		// Exemptions: none, the name, a matching prefix, a mismatched commit,
		// a too-short prefix, another plugin, and combinations.
		pin := inCommit
		if len(pin) > 9 {
			pin = pin[:9]
		}
		choices := []Exemption{{Name: "fz"}, {Name: "fz", Commit: pin}, {Name: "fz", Commit: "0000000deadbeef"}, {Name: "fz", Commit: "abc"}, {Name: "other"}}
		for i, e := range choices {
			if exb&(1<<i) != 0 {
				in.Exemptions = append(in.Exemptions, e)
			}
		}

		d := Decide(in)
		wantGVisor := m.Isolation == manifest.IsolationGVisor || in.PluginBackend == BackendGVisor
		if in.Private && d.Exempt {
			t.Fatalf("a private candidate is exempt: %+v", d)
		}
		if len(d.Servers) != len(m.Servers) || len(d.Hooks) != len(m.Hooks) {
			t.Fatalf("%d server and %d hook decisions for %d and %d", len(d.Servers), len(d.Hooks), len(m.Servers), len(m.Hooks))
		}
		for i, tg := range append(append([]Target(nil), d.Servers...), d.Hooks...) {
			if tg.Action == Sandboxed && tg.User.PerPlugin && (!in.Root || in.OS != "linux" || !in.DataDirTraversable || in.UserUnreachable != "") {
				t.Fatalf("%s sandboxed with a per-plugin user on root=%v os=%s traversable=%v", tg.Name, in.Root, in.OS, in.DataDirTraversable)
			}
			if tg.User.PerPlugin && tg.User.UID != PluginUID(m.Name) {
				t.Fatalf("per-plugin uid %d, want %d", tg.User.UID, PluginUID(m.Name))
			}
			if in.Private && tg.Exempt {
				t.Fatalf("a private candidate's %s is exempt", tg.Name)
			}
			if in.Private && tg.Action == Unsandboxed {
				t.Fatalf("a private candidate's %s runs unsandboxed", tg.Name)
			}
			if tg.Declare != manifest.SandboxDefault && tg.Action == Sandboxed {
				t.Fatalf("server %s (sandbox: %s) runs sandboxed", tg.Name, tg.Declare)
			}
			if i < len(m.Servers) && tg.Declare != m.Servers[i].Sandbox {
				t.Fatalf("server %s: declared %s, manifest says %s", tg.Name, tg.Declare, m.Servers[i].Sandbox)
			}
			if in.Tier == 0 && tg.Action == Sandboxed {
				t.Fatalf("tier 0 sandboxes %s", tg.Name)
			}
			if tg.Action == Refused && (len(tg.Reasons) == 0 || tg.Refusal() == "") {
				t.Fatalf("%s refused without a reason", tg.Name)
			}
			if wantGVisor && tg.Action == Sandboxed && tg.Backend != BackendGVisor {
				t.Fatalf("%s requires gVisor but runs on %s", tg.Name, tg.Backend)
			}
			if wantGVisor && tg.Action == Sandboxed && (!in.GVisor || in.OS != "linux" || in.Tier == 0) {
				t.Fatalf("%s sandboxed in gVisor on a node without it", tg.Name)
			}
			if wantGVisor && tg.Action == Unsandboxed && !d.Exempt {
				// Only the operator's exemption runs a gVisor plugin unsandboxed.
				t.Fatalf("%s requires gVisor but runs unsandboxed without an exemption", tg.Name)
			}
			if tg.Action == Unsandboxed && (tg.User.PerPlugin || tg.Network != NetHost || tg.Backend != BackendNone) {
				t.Fatalf("unsandboxed %s: %+v", tg.Name, tg)
			}
			if tg.Action == Sandboxed && in.Private && tg.Network != NetProxy {
				t.Fatalf("private candidate's %s on network %s", tg.Name, tg.Network)
			}
			if tg.Action == Sandboxed && in.Mode == Strict && tg.Network != NetProxy {
				t.Fatalf("strict %s on network %s", tg.Name, tg.Network)
			}
			if tg.Action == Sandboxed && in.Mode == Off && !in.Private && !wantGVisor {
				t.Fatalf("off mode sandboxes %s", tg.Name)
			}
			if tg.Exempt != d.Exempt {
				t.Fatalf("target exempt %v, plugin exempt %v", tg.Exempt, d.Exempt)
			}
		}
		if d.Refused != "" {
			for _, tg := range d.Servers {
				if tg.Action != Refused {
					t.Fatalf("plugin refused but %s is %s", tg.Name, tg.Action)
				}
			}
		}
		if in.Private && d.Build.PackageCode {
			t.Fatalf("a private candidate's build may run package code")
		}
		if in.Mode == Strict && in.Tier == 1 && !d.Exempt && d.Build.PackageCode {
			t.Fatalf("strict tier 1 build runs package code without an exemption")
		}
	})
}
