package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// write saves the report in dir as report.md, report.json and one
// latency-N.png chart per table.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Machine: %s  \nCommand: `%s`  \n%d runs of each operation after %d warm-up runs, corral interleaved with its peers.\n",
		r.Machine, r.Command, r.Runs, r.Warmup)
	for i, t := range r.Tables {
		chart := fmt.Sprintf("latency-%d.png", i+1)
		if err := t.chart(filepath.Join(dir, chart)); err != nil {
			return err
		}
		fmt.Fprintf(&md, "\n### %s\n\n", t.Title)
		t.markdown(&md)
		fmt.Fprintf(&md, "\n![%s](%s)\n", t.Title, chart)
	}
	for _, section := range []struct {
		title string
		figs  []*figure
	}{{scalingTitle, r.Scaling}, {coreTitle, r.Core}, {egressTitle, r.Egress}, {ttiTitle, r.TTI}, {filesTitle, r.Files}, {gvisorTitle, r.GVisor}} {
		if len(section.figs) == 0 {
			continue
		}
		fmt.Fprintf(&md, "\n### %s\n\n| measure | value | goal |\n| --- | --- | --- |\n", section.title)
		for _, f := range section.figs {
			fmt.Fprintf(&md, "| %s | %.4g %s | %s |\n", f.Name, f.Value, f.Unit, goalText(f))
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644)
}

// markdown writes the table as a Markdown table: p50/p95/max per side and
// the p50 ratio against the first peer.
func (t *table) markdown(md *strings.Builder) {
	md.WriteString("| operation | corral p50 / p95 / max |")
	for _, p := range t.Peers {
		fmt.Fprintf(md, " %s p50 / p95 / max |", p)
	}
	fmt.Fprintf(md, " ratio p50 vs %s |\n|---|---|", t.Peers[0])
	for range t.Peers {
		md.WriteString("---|")
	}
	md.WriteString("---|\n")
	cell := func(d []time.Duration) string {
		if len(d) == 0 {
			return "-"
		}
		s := stats(d)
		return fmt.Sprintf("%s / %s / %s", ms(s[0]), ms(s[1]), ms(s[2]))
	}
	for _, op := range t.Ops {
		fmt.Fprintf(md, "| %s | %s |", op, cell(t.Times[op]["corral"]))
		for _, p := range t.Peers {
			fmt.Fprintf(md, " %s |", cell(t.Times[op][p]))
		}
		if peer := t.Times[op][t.Peers[0]]; len(peer) > 0 {
			fmt.Fprintf(md, " %.2f× |\n", float64(stats(t.Times[op]["corral"])[0])/float64(stats(peer)[0]))
		} else {
			md.WriteString(" - |\n")
		}
	}
}

// chart draws a box plot per operation and side, in milliseconds.
func (t *table) chart(path string) error {
	p := plot.New()
	p.Title.Text = t.Title
	p.Y.Label.Text = "milliseconds"
	var names []string
	for _, op := range t.Ops {
		for _, who := range append([]string{"corral"}, t.Peers...) {
			d := t.Times[op][who]
			if len(d) == 0 {
				continue
			}
			values := make(plotter.Values, len(d))
			for i, v := range d {
				values[i] = float64(v.Microseconds()) / 1000
			}
			box, err := plotter.NewBoxPlot(vg.Points(14), float64(len(names)), values)
			if err != nil {
				return err
			}
			p.Add(box)
			names = append(names, op+"\n"+who)
		}
	}
	p.NominalX(names...)
	width := vg.Length(len(names))*vg.Centimeter*2.2 + 3*vg.Centimeter
	return p.Save(width, 10*vg.Centimeter, path)
}
