package bench

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The doors as clients use them (issue 34): each caller has its own MCP
// session — over --mcp-listen its own HTTP session, through the stdio door its
// own `oz0-node mcp` process, as Claude Code starts one per session — measured
// in the same cycles as TBXark/mcp-proxy with the same 8 sessions, each cycle
// a direct burst and one burst per door, in an order that turns each cycle.
const clientCycles = 15

// clientDoor is one door with a session per caller, and the processes it costs:
// the node (or the peer) first, then its bridges.
type clientDoor struct {
	name string
	css  []*mcp.ClientSession
	tool string
	pids []int

	rates, ratios, vsPeer []float64
	lat                   latencies
	cpu, nodeCPU          float64       // all its processes; the first alone
	alone                 latencies     // one caller alone
	added                 time.Duration // its p50 over direct's
}

// soloCycles × soloCalls calls a door makes with one caller alone.
const soloCycles, soloCalls = 5, 200

// soloBurst makes soloCalls calls one after the other on cs.
func soloBurst(b *testing.B, cs *mcp.ClientSession, tool string, lat *latencies) {
	args := map[string]any{"text": "x"}
	for range soloCalls {
		t0 := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			b.Errorf("call %s alone: %v %+v", tool, err, res)
			return
		}
		lat.add(time.Since(t0))
	}
}

// clientBurst has caller i call through its own session css[i], peerPerCaller
// times, all at once; it returns calls per second.
func clientBurst(b *testing.B, d *clientDoor, lat *latencies) float64 {
	args := map[string]any{"text": "x"}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range peerCallers {
		cs := d.css[i%len(d.css)]
		wg.Go(func() {
			for range peerPerCaller {
				t0 := time.Now()
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: d.tool, Arguments: args})
				if err != nil || res.IsError {
					b.Errorf("%s: call %s: %v %+v", d.name, d.tool, err, res)
					return
				}
				if lat != nil {
					lat.add(time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
	return peerCallers * peerPerCaller / time.Since(start).Seconds()
}

// BenchmarkGatewayClients: tool calls/s, CPU per call, p50/p99 and RSS of both
// doors with one session per caller, against TBXark/mcp-proxy with as many, on
// a Python and a Go backend under the node's bwrap sandbox.
func BenchmarkGatewayClients(b *testing.B) {
	d, node, addr, token, backends := echoBench(b)
	bin := nodeBinary(b)
	for _, be := range backends {
		direct := cmdDoor(b, exec.Command(be.argv[0], be.argv[1:]...), "echo", false)
		tool := be.plugin + "__echo"
		listen := &clientDoor{name: "listen", tool: tool, pids: []int{node.Process.Pid}}
		bridge := &clientDoor{name: "bridge", tool: tool, pids: []int{node.Process.Pid}}
		startRSS := rssKB(node.Process.Pid)
		for range peerCallers {
			bd := cmdDoor(b, exec.Command(bin, "--data-dir", d.Root, "mcp"), tool, true)
			bridge.css = append(bridge.css, bd.cs)
			bridge.pids = append(bridge.pids, bd.pids...)
		}
		// The node with the 8 stdio sessions (their first calls made) and no
		// other: its footprint before any burst (the first backend's only).
		clientBurst(b, bridge, nil)
		idleRSS := rssKB(node.Process.Pid)
		for range peerCallers {
			listen.css = append(listen.css, httpDoor(b, "http://"+addr+"/mcp", token, tool).cs)
		}
		doors := []*clientDoor{listen, bridge}
		var tbx *clientDoor
		if os.Getenv("OZ0_BENCH_TBXARK") != "" {
			url, pid := startTBXark(b, be.argv)
			tbx = &clientDoor{name: "tbxark", tool: "echo", pids: []int{pid}}
			for range peerCallers {
				tbx.css = append(tbx.css, httpDoor(b, url, "", "echo").cs)
			}
			doors = append(doors, tbx)
		}
		for _, dd := range doors {
			clientBurst(b, dd, nil) // warm: every session has made its first calls
		}
		for cycle := range clientCycles {
			r0 := burst(b, direct, nil)
			order := slices.Clone(doors)
			for range cycle % len(order) {
				order = append(order[1:], order[0])
			}
			for _, dd := range order {
				c0, n0 := cpuOf(dd.pids), cpuSeconds(dd.pids[0])
				r := clientBurst(b, dd, &dd.lat)
				dd.cpu += cpuOf(dd.pids) - c0
				dd.nodeCPU += cpuSeconds(dd.pids[0]) - n0
				dd.rates, dd.ratios = append(dd.rates, r), append(dd.ratios, r/r0)
			}
		}
		// One caller alone: what each door adds to a call's latency (p50),
		// direct and the doors in turn, each on its first session.
		var alone latencies
		for range soloCycles {
			soloBurst(b, direct.cs, "echo", &alone)
			for _, dd := range doors {
				soloBurst(b, dd.css[0], dd.tool, &dd.alone)
			}
		}
		directAlone := alone.median()
		for _, dd := range doors {
			dd.added = dd.alone.median() - directAlone
		}
		for _, dd := range doors {
			if tbx != nil {
				for i, r := range dd.rates {
					dd.vsPeer = append(dd.vsPeer, r/tbx.rates[i])
				}
			}
			b.Run(be.name+"-clients-"+dd.name, func(b *testing.B) {
				if dd == bridge && be.name == backends[0].name {
					b.ReportMetric(float64(idleRSS)/1024, "node-RSS-8-sessions-MB")
					b.ReportMetric(float64(startRSS)/1024, "node-RSS-0-sessions-MB")
				}
				reportClientDoor(b, dd)
			})
		}
		if tbx == nil {
			b.Run(be.name+"-clients-tbxark", func(b *testing.B) {
				b.Skip("not measured: TBXark/mcp-proxy is not built here (OZ0_BENCH_TBXARK; scripts/bench builds v0.43.2)")
			})
		}
	}
}

// reportClientDoor reports a door's cycles.
func reportClientDoor(b *testing.B, d *clientDoor) {
	b.ReportMetric(median(d.rates), "calls/s")
	b.ReportMetric(median(d.ratios), "x-paired-direct")
	calls := float64(len(d.rates) * peerCallers * peerPerCaller)
	b.ReportMetric(d.cpu/calls*1e6, "cpu-µs/call")
	b.ReportMetric(d.nodeCPU/calls*1e6, "node-cpu-µs/call")
	rss := 0
	for _, p := range d.pids {
		rss += rssKB(p)
	}
	b.ReportMetric(float64(rss)/1024, "RSS-MB")
	b.ReportMetric(float64(rssKB(d.pids[0]))/1024, "node-RSS-MB")
	d.lat.report(b)
	l := d.lat.d // sorted by report
	b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(d.added.Microseconds()), "alone-added-p50-µs")
	if len(d.vsPeer) > 0 {
		b.ReportMetric(median(d.vsPeer), "x-paired-tbxark")
	}
	b.ReportMetric(0, "ns/op")
}

// median is the middle of the durations recorded.
func (l *latencies) median() time.Duration {
	s := slices.Clone(l.d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
