package report

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// The report page: one HTML file with its CSS and its plots (SVG drawn
// here) inside, so it can be mailed, archived, opened offline the next day.
// It asks for nothing from anywhere and runs no script.

//go:embed report.html.tmpl
var pageTmpl string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ts":       func(ms int64) string { return tsOf(ms) },
	"sec":      func(s int64) string { return tsOf(s * 1000) },
	"num":      func(v any) string { return fmtNum(v) },
	"ms":       func(v float64) string { return fmtMs(v) },
	"dur":      func(s float64) string { return fmtDur(s) },
	"pct":      func(a, b int64) string { return pct(a, b) },
	"kindText": func(k string) string { return spanText[k] },
	"add":      func(a, b int64) int64 { return a + b },
	"sub":      func(a, b, c int64) int64 { return a - b + c },
	"i64":      func(v uint64) int64 { return int64(v) },
	"f64":      func(v int64) float64 { return float64(v) },
	"msf":      func(v int64) float64 { return float64(v) / 1000 },
}).Parse(pageTmpl))

var spanText = map[string]string{"recovering": "fenced, recovering from the ledger", "degraded": "degraded (switch on)", "breaker_open": "Redis breaker open on an edge"}

// WriteHTML writes the report page.
func (r *Report) WriteHTML(w io.Writer) error {
	js, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return page.Execute(w, struct {
		R      *Report
		Plots  []template.HTML
		Room   []template.HTML
		JSONSz int
	}{r, r.plots(), r.roomPlots(), len(js)})
}

// plots are the report's time charts.
func (r *Report) plots() []template.HTML {
	var out []template.HTML
	n := len(r.Sold)
	f := func(v []int64) []float64 {
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = float64(x)
		}
		return o
	}
	out = append(out, r.chart("Sold per second", "units/s", []line{{"sold", "sold", f(r.Sold), sum}}))
	if e := r.Edges; e != nil {
		var lines []line
		names := codeNames()
		for c, series := range e.Codes {
			var total uint64
			for _, v := range series {
				total += v
			}
			if total == 0 {
				continue
			}
			v := make([]float64, len(series))
			for i, x := range series {
				v[i] = float64(x)
			}
			lines = append(lines, line{names[c], "c" + names[c], v, sum})
		}
		out = append(out, r.chart("Answers to “do” by code, per second (every edge)", "/s", lines))
		p50, p99 := make([]float64, n), make([]float64, n)
		copy(p50, e.P50)
		copy(p99, e.P99)
		out = append(out, r.chart("“do” latency by second", "ms", []line{{"p50", "p50", p50, maxOf}, {"p99", "p99", p99, maxOf}}))
	}
	cum := func(v []int64) []float64 {
		o := make([]float64, len(v))
		var c int64
		for i, x := range v {
			c += x
			o[i] = float64(c)
		}
		return o
	}
	out = append(out, r.chart("Payments and expiries, units so far", "units", []line{
		{"sold", "sold", cum(r.Sold), last}, {"paid", "paid", cum(r.Paid), last}, {"expired", "expired", cum(r.Expired), last}}))
	return out
}

// roomPlots are the room's charts: the line over time and the waits.
func (r *Report) roomPlots() []template.HTML {
	if r.Room == nil || r.Edges == nil {
		return nil
	}
	e := r.Edges
	f := func(v []int64) []float64 {
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = float64(x)
			if x < 0 {
				o[i] = -1
			}
		}
		return o
	}
	out := []template.HTML{r.chart("The line over time", "shoppers", []line{
		{"joined", "joined", f(e.Joined), last}, {"waiting", "waiting", f(e.Waiting), last},
		{"admitted", "admitted", f(e.Admitted), last}, {"active", "active", f(e.Active), last}})}
	if w := r.Room.Waits; w.Counted > 0 {
		out = append(out, bars("How long shoppers waited to be let in", w))
	}
	return out
}

// line is one series of a chart and how to fold seconds into a point.
type line struct {
	name, cls string
	v         []float64 // one per second; < 0 unknown
	fold      func([]float64) float64
}

func sum(v []float64) float64 { // per second: the mean rate over the folded seconds
	var s float64
	n := 0
	for _, x := range v {
		if x >= 0 {
			s += x
			n++
		}
	}
	if n == 0 {
		return -1
	}
	return s / float64(n)
}

func maxOf(v []float64) float64 {
	m := -1.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

func last(v []float64) float64 {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] >= 0 {
			return v[i]
		}
	}
	return -1
}

const (
	chartW, chartH = 900, 230
	maxPoints      = 450
)

// chart draws lines over the report's span, with the incidents shaded.
func (r *Report) chart(title, unit string, lines []line) template.HTML {
	n := int(r.ToSec - r.FromSec + 1)
	per := max(1, (n+maxPoints-1)/maxPoints) // seconds per point
	pts := (n + per - 1) / per
	ml, mr, mt, mb := 56.0, 12.0, 12.0, 26.0
	X := func(k float64) float64 { return ml + k/float64(max(1, pts-1))*(chartW-ml-mr) }
	folded := make([][]float64, len(lines))
	top := 0.0
	for i, l := range lines {
		folded[i] = make([]float64, pts)
		for p := range pts {
			a, b := p*per, min(len(l.v), (p+1)*per)
			if a >= b {
				folded[i][p] = -1
				continue
			}
			folded[i][p] = l.fold(l.v[a:b])
			top = math.Max(top, folded[i][p])
		}
	}
	top = niceTop(top * 1.05)
	Y := func(v float64) float64 { return chartH - mb - v/top*(chartH-mt-mb) }
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart"><figcaption>%s <small>%s`, html.EscapeString(title), html.EscapeString(unit))
	if per > 1 {
		fmt.Fprintf(&b, ` · one point per %s`, fmtDur(float64(per)))
	}
	b.WriteString(`</small></figcaption><div class="legend">`)
	for i, l := range lines {
		fmt.Fprintf(&b, `<span class="lg %s"><i></i>%s <b>%s</b></span>`, l.cls, html.EscapeString(l.name), fmtNum(lastKnown(folded[i])))
	}
	fmt.Fprintf(&b, `</div><svg viewBox="0 0 %d %d" role="img" aria-label="%s" data-chart="%s">`, chartW, chartH, html.EscapeString(title), html.EscapeString(title))
	// Incidents behind everything.
	for _, s := range r.Incidents {
		x0 := X(float64(s.FromSec-r.FromSec) / float64(per))
		x1 := X(float64(s.ToSec-r.FromSec+1) / float64(per))
		fmt.Fprintf(&b, `<rect class="inc %s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s %s – %s</title></rect>`,
			s.Kind, x0, mt, math.Max(1.5, x1-x0), chartH-mt-mb, spanText[s.Kind], tsOf(s.FromSec*1000), tsOf(s.ToSec*1000))
	}
	for _, v := range []float64{0, top / 2, top} {
		cls := "grid"
		if v == 0 {
			cls = "axis"
		}
		fmt.Fprintf(&b, `<line class="%s" x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f"/><text class="yt" x="%.0f" y="%.1f">%s</text>`,
			cls, ml, chartW-mr, Y(v), Y(v), ml-6, Y(v)+4, fmtNum(v))
	}
	ticks := 6
	for i := 0; i <= ticks; i++ {
		k := float64(pts-1) * float64(i) / float64(ticks)
		sec := r.FromSec + int64(k*float64(per))
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case ticks:
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text class="xt" x="%.1f" y="%d" text-anchor="%s">%s</text>`, X(k), chartH-8, anchor, clockOf(sec, n))
	}
	for i, l := range lines {
		var d strings.Builder
		run := 0 // points in the current stretch; a lone point is drawn as a dot
		dot := func(p int) {
			if run == 1 {
				fmt.Fprintf(&b, `<circle class="dot %s" cx="%.1f" cy="%.1f" r="2.5"/>`, l.cls, X(float64(p-1)), Y(folded[i][p-1]))
			}
		}
		for p, v := range folded[i] {
			if v < 0 {
				dot(p)
				run = 0
				continue
			}
			if run > 0 {
				d.WriteByte('L')
			} else {
				d.WriteByte('M')
			}
			fmt.Fprintf(&d, "%.1f %.1f", X(float64(p)), Y(v))
			run++
		}
		dot(len(folded[i]))
		if d.Len() > 0 {
			fmt.Fprintf(&b, `<path class="ln %s" data-series="%s" d="%s"/>`, l.cls, html.EscapeString(l.name), d.String())
		}
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

// bars draws the wait histogram.
func bars(title string, w WaitStats) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart"><figcaption>%s <small>shoppers let in, by wait</small></figcaption>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" role="img" aria-label="%s" data-chart="waits">`, chartW, chartH, html.EscapeString(title))
	top := 0.0
	for _, c := range w.Histogram {
		top = math.Max(top, float64(c))
	}
	top = niceTop(top * 1.05)
	ml, mb, mt := 56.0, 26.0, 12.0
	bw := (chartW - ml - 12) / float64(len(w.Histogram))
	for i, c := range w.Histogram {
		h := float64(c) / top * (chartH - mt - mb)
		x := ml + float64(i)*bw
		label := "> " + fmtDur(w.Bounds[len(w.Bounds)-1])
		if i < len(w.Bounds) {
			label = "≤ " + fmtDur(w.Bounds[i])
		}
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d</title></rect>`, x+4, chartH-mb-h, bw-8, h, label, c)
		fmt.Fprintf(&b, `<text class="xt" x="%.1f" y="%d">%s</text>`, x+bw/2, chartH-8, label)
		if c > 0 {
			fmt.Fprintf(&b, `<text class="bt" x="%.1f" y="%.1f">%d</text>`, x+bw/2, chartH-mb-h-4, c)
		}
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%.0f" x2="%d" y1="%.1f" y2="%.1f"/>`, ml, chartW-12, chartH-mb, chartH-mb)
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

func lastKnown(v []float64) float64 {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] >= 0 {
			return v[i]
		}
	}
	return -1
}

func niceTop(max float64) float64 {
	if max <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(max)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		if max <= f*p {
			return f * p
		}
	}
	return 10 * p
}

func tsOf(ms int64) string {
	if ms <= 0 {
		return "—"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05 UTC")
}

func clockOf(sec int64, span int) string {
	t := time.Unix(sec, 0).UTC()
	if span > 86400/2 {
		return t.Format("01-02 15:04")
	}
	return t.Format("15:04:05")
}

func fmtNum(v any) string {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float64:
		f = x
	default:
		return fmt.Sprint(v)
	}
	switch {
	case f < 0:
		return "—"
	case f == math.Trunc(f) && f < 1e15:
		s := strconv.FormatInt(int64(f), 10)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	case f < 10:
		return strconv.FormatFloat(f, 'f', 2, 64)
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

func fmtMs(v float64) string {
	if v < 0 {
		return "—"
	}
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
}

func fmtDur(s float64) string {
	switch {
	case s < 0:
		return "—"
	case s < 60:
		return strconv.FormatFloat(s, 'f', 0, 64) + " s"
	case s < 3600 && int(s)%60 == 0:
		return fmt.Sprintf("%d min", int(s)/60)
	case s < 3600:
		return fmt.Sprintf("%d min %02d s", int(s)/60, int(s)%60)
	case int(s)%3600 == 0:
		return fmt.Sprintf("%d h", int(s)/3600)
	}
	return fmt.Sprintf("%d h %02d min", int(s)/3600, int(s)%3600/60)
}

func pct(a, b int64) string {
	if b <= 0 {
		return "—"
	}
	return strconv.FormatFloat(float64(a)*100/float64(b), 'f', 1, 64) + " %"
}
