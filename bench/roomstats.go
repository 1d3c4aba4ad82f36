package main

import (
	"math"
	"sort"
)

// The statistics of the waiting room's fairness check: does the order in
// which shoppers joined the pre-queue predict the place the lottery gave
// them? Two tests, both of which a fair lottery passes and a queue that is
// FIFO in disguise (or any bias by arrival) fails: Spearman's rank
// correlation (near 0 for a fair draw; 1 for FIFO) and a chi-square test of
// independence over arrival decile × position decile (df 81 for 10 × 10).

// ranks gives each value its rank 1..n, ties the average of their ranks.
func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

// spearman is the rank correlation of x and y (Pearson's r of their
// ranks, which handles ties); NaN for fewer than 2 pairs or a constant
// series.
func spearman(x, y []float64) float64 {
	if len(x) != len(y) || len(x) < 2 {
		return math.NaN()
	}
	rx, ry := ranks(x), ranks(y)
	n := float64(len(x))
	var mx, my float64
	for i := range rx {
		mx += rx[i]
		my += ry[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mx, ry[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

// decileTable counts pairs by the decile of x's rank (rows) and of y's
// rank (columns): each decile holds a tenth of the pairs, so a fair draw
// expects n/100 in every cell.
func decileTable(x, y []float64) [10][10]int {
	var t [10][10]int
	n := len(x)
	if n == 0 || len(y) != n {
		return t
	}
	rx, ry := ranks(x), ranks(y)
	dec := func(r float64) int { return min(9, int((r-1)*10/float64(n))) }
	for i := range rx {
		t[dec(rx[i])][dec(ry[i])]++
	}
	return t
}

// chiSquare is Pearson's statistic of independence for a contingency
// table (expected = row total × column total / n) and its degrees of
// freedom, (rows-1)(cols-1) over the rows and columns that are not empty.
func chiSquare(obs [][]int) (stat float64, df int) {
	rows := make([]float64, len(obs))
	var cols []float64
	var n float64
	for i, r := range obs {
		if len(r) > len(cols) {
			cols = append(cols, make([]float64, len(r)-len(cols))...)
		}
		for j, o := range r {
			rows[i] += float64(o)
			cols[j] += float64(o)
			n += float64(o)
		}
	}
	if n == 0 {
		return 0, 0
	}
	nr, nc := 0, 0
	for _, v := range rows {
		if v > 0 {
			nr++
		}
	}
	for _, v := range cols {
		if v > 0 {
			nc++
		}
	}
	for i, r := range obs {
		for j := range cols {
			e := rows[i] * cols[j] / n
			if e == 0 {
				continue
			}
			o := 0.0
			if j < len(r) {
				o = float64(r[j])
			}
			stat += (o - e) * (o - e) / e
		}
	}
	return stat, max(0, (nr-1)*(nc-1))
}

// chiSquareP is the chance that a chi-square variable with df degrees of
// freedom is at least stat: the upper regularized incomplete gamma
// Q(df/2, stat/2).
func chiSquareP(stat float64, df int) float64 {
	if df <= 0 || math.IsNaN(stat) {
		return math.NaN()
	}
	if stat <= 0 {
		return 1
	}
	return gammaQ(float64(df)/2, stat/2)
}

// gammaQ is Q(a, x) = Γ(a, x)/Γ(a): a power series of P for x < a+1,
// else a continued fraction of Q (modified Lentz), each to ~1e-14.
func gammaQ(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	pre := math.Exp(a*math.Log(x) - x - lg)
	if x < a+1 {
		// P(a, x) = pre · Σ x^k / (a (a+1) … (a+k))
		term := 1 / a
		sum := term
		for k := 1; k < 10000; k++ {
			term *= x / (a + float64(k))
			sum += term
			if math.Abs(term) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return max(0, 1-pre*sum)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i < 10000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return pre * h
}

// tableRows turns a decile table into chiSquare's rows.
func tableRows(t [10][10]int) [][]int {
	out := make([][]int, 10)
	for i := range t {
		out[i] = t[i][:]
	}
	return out
}
