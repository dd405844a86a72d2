package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/termtext"
)

func newAuditCmd(g *globals) *cobra.Command {
	var follow, asJSON bool
	var plugin, since string
	c := &cobra.Command{
		Use:   "audit [--follow] [--plugin P] [--since T] [--json]",
		Short: "Show the audit stream: every tool call, hook run, egress decision and approval",
		Long: `Show the node's audit stream (<data>/logs/audit.jsonl and its rotated files), oldest
first: one line per tool call, hook run, egress decision and operator approval
(docs/audit.md says what each field holds). It reads the files, so it works
whether or not the node runs. --plugin keeps one plugin's lines, --since those
from a time on (RFC 3339, or a duration back from now such as 15m), --json prints
the lines as written, --follow keeps printing new ones until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return usagef("--since %q: %v", since, err)
			}
			keep := func(r api.AuditRecord) bool {
				if plugin != "" && r.Plugin != plugin {
					return false
				}
				if !from.IsZero() {
					t, err := time.Parse(time.RFC3339Nano, r.Time)
					return err == nil && !t.Before(from)
				}
				return true
			}
			w := cmd.OutOrStdout()
			print := func(r api.AuditRecord, line []byte) bool {
				if !keep(r) {
					return true
				}
				var err error
				if asJSON {
					_, err = fmt.Fprintf(w, "%s\n", termtext.EscapeJSON(line))
				} else {
					_, err = fmt.Fprintln(w, auditText(r))
				}
				return err == nil
			}
			if _, err := os.Stat(d.Audit()); err != nil && len(audit.Files(d.Audit())) == 0 && !follow {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("no audit stream at %s yet (the node writes it once it runs)", d.Audit())}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if err := audit.Read(d.Audit(), print); err != nil {
				return err
			}
			if follow {
				return audit.Follow(ctx, d.Audit(), 200*time.Millisecond, print)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	c.Flags().StringVar(&plugin, "plugin", "", "only this plugin's lines")
	c.Flags().StringVar(&since, "since", "", "only lines from this time on: RFC 3339 (2026-05-01T10:00:00Z) or a duration back from now (15m, 2h)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the lines as written (JSON)")
	return c
}

// parseSince reads --since: an RFC 3339 time, or a duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("neither an RFC 3339 time nor a duration such as 15m")
	}
	return now.Add(-d), nil
}

// auditText is one line of the stream for a person: when, its number, what kind,
// who, what was decided and why. Plugin-written text is made inert.
func auditText(r api.AuditRecord) string {
	var b strings.Builder
	when := r.Time
	if t, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
		when = t.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	fmt.Fprintf(&b, "%s #%d %-8s", when, r.Seq, r.Kind)
	who := r.Plugin
	if r.Server != "" {
		who += "/" + r.Server
	}
	field := func(format string, a ...any) { b.WriteString(" " + fmt.Sprintf(format, a...)) }
	switch r.Kind {
	case "call":
		field("%s %s %s %s", r.Door, who, r.Tool, r.Decision)
		if r.Outcome != "" {
			field("%s", r.Outcome)
		}
		if r.RPCError != 0 {
			field("code=%d", r.RPCError)
		}
		field("%s %dB args=%.12s…", seconds(r.Seconds), r.ResultBytes, r.ArgsSHA256)
	case "hook":
		field("%s %s", r.Event, who)
		if r.Tool != "" {
			field("%s", r.Tool)
		}
		field("%s %s", r.Decision, seconds(r.Seconds))
		if len(r.Dropped) > 0 {
			field("dropped=%s", strings.Join(r.Dropped, ","))
		}
	case "egress":
		field("%s %s:%d %s", who, r.Host, r.Port, r.Decision)
		if r.Bytes > 0 {
			field("%dB", r.Bytes)
		}
	case "approval":
		what := r.Tool
		if r.Host != "" {
			what = fmt.Sprintf("%s:%d", r.Host, r.Port)
		}
		field("%s %s %s %s asked=%d", r.Approval, who, what, r.Decision, r.Asked)
		if r.By != "" {
			field("by %s", r.By)
		}
	default:
		field("%s", r.Decision)
		if r.DroppedLines > 0 {
			field("dropped_lines=%d", r.DroppedLines)
		}
	}
	if r.Rule != "" {
		field("— %s", r.Rule)
	}
	return termtext.Line(b.String())
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Microsecond).String()
}

// approvalText is one approval waiting, for `oz0-node approvals` and the TUI.
func approvalText(w io.Writer, a api.Approval) {
	what := a.Tool
	if a.Kind == "egress" {
		what = fmt.Sprintf("%s:%d", a.Host, a.Port)
	}
	who := a.Plugin
	if a.Server != "" {
		who += "/" + a.Server
	}
	fmt.Fprintln(w, termtext.Line(fmt.Sprintf("%s  %s %s for %s, asked %d time(s), %d waiting, refused at %s", a.ID, a.Kind, what, who, a.Asked, a.Waiting, a.Expires)))
	if a.Reason != "" {
		fmt.Fprintln(w, termtext.Line("    manifest's reason: "+a.Reason))
	}
	fmt.Fprintln(w, termtext.Line("    refused unless allowed: "+a.Refusal))
	answers := "oz0-node approve " + a.ID + " (once)"
	if a.Always {
		answers += ", oz0-node approve --always " + a.ID
	}
	fmt.Fprintln(w, "    answer: "+answers+", oz0-node deny "+a.ID)
}

func newApprovalsCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "approvals [--json]",
		Short: "List the requests waiting for an operator's answer (--approval-wait)",
		Long: `List what waits for an operator on the running node (run with --approval-wait):
connections to a host a plugin's manifest names and the tenant's egress list does
not, and calls of tools the tenant's tool rules refuse. Each shows the plugin and
server, the manifest's reason, how many times it was asked and when it is refused
if nobody answers. Answer with oz0-node approve ID [--always] or oz0-node deny ID.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			list, err := api.NewClient(d.Control()).Approvals(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing waits for an answer")
				return nil
			}
			for _, a := range list {
				approvalText(cmd.OutOrStdout(), a)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newAnswerCmd(g *globals, use, short string, answer func(always bool) string) *cobra.Command {
	var always bool
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			a := answer(always)
			if err := api.NewClient(d.Control()).Answer(ctx, args[0], a, "cli"); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "approval %s: %s\n", args[0], a)
			return nil
		},
	}
	if strings.HasPrefix(use, "approve") {
		c.Flags().BoolVar(&always, "always", false, "allow it from now on: a line in the tenant's file (egress list or tool rules), with a comment saying who and when")
	}
	return c
}

func newApproveCmd(g *globals) *cobra.Command {
	return newAnswerCmd(g, "approve ID [--always]", "Allow a waiting request once (or always: written to the tenant's file)", func(always bool) string {
		if always {
			return api.AnswerAlways
		}
		return api.AnswerOnce
	})
}

func newDenyCmd(g *globals) *cobra.Command {
	return newAnswerCmd(g, "deny ID", "Refuse a waiting request (and every one waiting with it)", func(bool) string { return api.AnswerDeny })
}
