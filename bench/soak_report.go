package main

import (
	"fmt"
	"html/template"
	"strings"
)

// soakTmpl is the soak's report.html: the verdict per resource and one
// chart per kind of resource over the whole run (the warm-up is the first
// half; the dashed line of each chart is the bound's fit).
var soakTmpl = template.Must(template.New("soak").Funcs(template.FuncMap{
	"f1": func(v float64) string { return fmt.Sprintf("%.1f", v) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bench soak</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}.ok{color:#080}.bad{color:#b00;font-weight:bold}
pre{background:#f6f6f6;padding:8px;overflow-x:auto}
</style></head><body>
<h1>bench: soak</h1>
<p>{{.R.Machine}} · {{.R.Started.Format "2006-01-02 15:04 UTC"}} · commit {{.R.Commit}} · {{f1 .R.Duration}} s · {{len .R.Samples}} samples · {{.R.Ops}} operations</p>
<pre>{{.Line}}</pre>
<h2>Flat after the warm-up?</h2>
<p>The warm-up is the first half of the run. Through the samples of the second half a straight line is fitted
(least squares); its rise over that half must stay within the bound (a share of the mean plus a constant). Falling is flat.</p>
<table><tr><th>resource</th><th>unit</th><th>fit after warm-up</th><th>fit at end</th><th>growth</th><th>bound</th><th>max</th><th>flat</th></tr>
{{range .R.Flatness}}<tr><td>{{.Name}}</td><td>{{.Unit}}</td><td>{{f1 .First}}</td><td>{{f1 .Last}}</td><td>{{f1 .Growth}}</td><td>{{f1 .Bound}}</td><td>{{f1 .Max}}</td>
<td>{{if .Flat}}<span class="ok">yes</span>{{else}}<span class="bad">no</span>{{end}}</td></tr>
{{end}}</table>
{{range .Charts}}{{.}}{{end}}
<h2>The promises (checker and reconcile over the whole run)</h2>
<pre>{{.Checker}}</pre>
</body></html>
`))

func soakHTML(r *SoakResult) string {
	res := soakResources(0)
	edges := 0
	if len(r.Samples) > 0 {
		edges = len(r.Samples[0].Edges)
	}
	series := func(name string, rs []resource) Series {
		var pts [][2]float64
		for _, s := range r.Samples {
			for _, x := range rs {
				if v, ok := x.value(s); ok {
					pts = append(pts, [2]float64{s.T, v})
				}
			}
		}
		return Series{Name: name, Points: pts}
	}
	var charts []template.HTML
	all := soakResources(edges)
	for _, kind := range []struct{ title, suffix, y string }{
		{"RSS per edge", " RSS", "MB"}, {"goroutines per edge", " goroutines", "goroutines"}, {"open file descriptors per edge", " open fds", "fds"},
	} {
		var ss []Series
		for _, x := range all {
			if strings.HasSuffix(x.name, kind.suffix) {
				s := series(strings.TrimSuffix(x.name, kind.suffix), []resource{x})
				s.Color = palette[len(ss)%len(palette)]
				ss = append(ss, s)
			}
		}
		charts = append(charts, lineChart(kind.title, "seconds since the load started", kind.y, ss, false))
	}
	for i, x := range res {
		s := series(x.name, []resource{x})
		s.Color = palette[i%len(palette)]
		charts = append(charts, lineChart(x.name, "seconds since the load started", x.unit, []Series{s}, false))
	}
	var checker strings.Builder
	printSoak(&checker, r)
	var b strings.Builder
	if err := soakTmpl.Execute(&b, map[string]any{"R": r, "Line": r.resultLine(), "Charts": charts, "Checker": checker.String()}); err != nil {
		return "report: " + err.Error()
	}
	return b.String()
}
