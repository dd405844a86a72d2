package tui

import (
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
)

// fit cuts s to w cells (marking the cut with "…") and pads it to exactly w.
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if ansi.StringWidth(s) > w {
		s = ansi.Truncate(s, w, "…")
	}
	if pad := w - ansi.StringWidth(s); pad > 0 {
		s += strings.Repeat(" ", pad)
	}
	return s
}

// cut shortens s to at most w cells without padding.
func cut(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if ansi.StringWidth(s) > w {
		return ansi.Truncate(s, w, "…")
	}
	return s
}

// column is one column of a table: a fixed width, or flex (takes what is left).
type column struct {
	title string
	width int
	flex  bool
}

// layoutColumns gives the flex column the width the fixed ones leave, never less
// than minFlex; 2 cells stay for the cursor mark.
func layoutColumns(cols []column, total, minFlex int) []column {
	out := append([]column(nil), cols...)
	used := 2
	for _, c := range out {
		if !c.flex {
			used += c.width
		}
	}
	used += len(out) - 1 // one space between columns
	for i := range out {
		if out[i].flex {
			out[i].width = max(minFlex, total-used)
		}
	}
	return out
}

// cell is one rendered table cell: its text and the style that colours it.
type cell struct {
	text  string
	style *lipgloss.Style
}

func plain(s string) cell { return cell{text: s} }

func styled(s string, st lipgloss.Style) cell { return cell{text: s, style: &st} }

// row renders cells in columns; the cursor mark "> " makes the selection visible
// without colour.
func row(cols []column, cells []cell, selected bool, sel lipgloss.Style) string {
	var b strings.Builder
	if selected {
		b.WriteString("> ")
	} else {
		b.WriteString("  ")
	}
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		txt := ""
		var st *lipgloss.Style
		if i < len(cells) {
			txt, st = cells[i].text, cells[i].style
		}
		txt = fit(txt, c.width)
		if st != nil && !selected {
			txt = st.Render(txt)
		}
		b.WriteString(txt)
	}
	if selected {
		return sel.Render(b.String())
	}
	return b.String()
}

func headRow(cols []column, st lipgloss.Style) string {
	var b strings.Builder
	b.WriteString("  ")
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fit(c.title, c.width))
	}
	return st.Render(strings.TrimRight(b.String(), " "))
}

// wrap breaks text at word boundaries to w cells, indenting continuation lines.
func wrap(s string, w int, indent string) []string {
	if w-len(indent) < 10 {
		return []string{cut(s, w)}
	}
	lines := wordWrap(s, w-len(indent))
	for i := range lines {
		lines[i] = indent + lines[i]
	}
	return lines
}

// wordWrap breaks plain text at spaces only — a flag such as
// --plugin-sandbox-exempt name@commit must stay whole to be copied — and cuts a
// word longer than a line.
func wordWrap(s string, limit int) []string {
	var lines []string
	cur, curW := "", 0
	for _, word := range strings.Fields(s) {
		ww := ansi.StringWidth(word)
		for ww > limit {
			if curW > 0 {
				lines = append(lines, cur)
				cur, curW = "", 0
			}
			head := ansi.Truncate(word, limit, "")
			lines = append(lines, head)
			word = word[len(head):]
			ww = ansi.StringWidth(word)
		}
		switch {
		case curW == 0:
			cur, curW = word, ww
		case curW+1+ww <= limit:
			cur, curW = cur+" "+word, curW+1+ww
		default:
			lines = append(lines, cur)
			cur, curW = word, ww
		}
	}
	if curW > 0 || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}

// wrapHang wraps s with first before the first line and rest before the others,
// so a list item's continuation lines hang under its text.
func wrapHang(s string, w int, first, rest string) []string {
	iw := max(len(first), len(rest))
	if w-iw < 10 {
		return []string{cut(first+s, w)}
	}
	lines := wordWrap(s, w-iw)
	for i := range lines {
		if i == 0 {
			lines[i] = first + lines[i]
		} else {
			lines[i] = rest + lines[i]
		}
	}
	return lines
}

// fitHeight makes a block exactly h lines: cut or padded with empty lines.
func fitHeight(lines []string, h int) []string {
	if h <= 0 {
		return nil
	}
	if len(lines) > h {
		return lines[:h]
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	return lines
}

// listNav is the cursor and scroll position of a list of n rows in h lines.
type listNav struct {
	cursor, offset int
}

func (l *listNav) clamp(n, h int) {
	if n == 0 {
		l.cursor, l.offset = 0, 0
		return
	}
	l.cursor = min(max(l.cursor, 0), n-1)
	if h <= 0 {
		h = 1
	}
	if l.cursor < l.offset {
		l.offset = l.cursor
	}
	if l.cursor >= l.offset+h {
		l.offset = l.cursor - h + 1
	}
	l.offset = min(max(l.offset, 0), max(0, n-h))
}

// move handles the navigation keys; it reports whether msg was one.
func (l *listNav) move(k KeyMap, km tea.KeyPressMsg, n, h int) bool {
	switch {
	case key.Matches(km, k.Up):
		l.cursor--
	case key.Matches(km, k.Down):
		l.cursor++
	case key.Matches(km, k.PageUp):
		l.cursor -= max(1, h-1)
	case key.Matches(km, k.PageDown):
		l.cursor += max(1, h-1)
	case key.Matches(km, k.Top):
		l.cursor = 0
	case key.Matches(km, k.Bottom):
		l.cursor = n - 1
	default:
		return false
	}
	l.clamp(n, h)
	return true
}

func stripped(s string) string { return ansi.Strip(s) }
