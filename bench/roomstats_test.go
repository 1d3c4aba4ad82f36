package main

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %.10g, want %.10g (±%g)", what, got, want, tol)
	}
}

func TestSpearmanKnownValues(t *testing.T) {
	// A textbook pair with a tie in y: ranks of y are 1, 2, 3.5, 5, 3.5.
	near(t, "spearman(ties)", spearman([]float64{1, 2, 3, 4, 5}, []float64{5, 6, 7, 8, 7}), 0.8207826816681233, 1e-12)
	near(t, "spearman(same order)", spearman([]float64{1, 2, 3, 4}, []float64{10, 20, 30, 400}), 1, 1e-12)
	near(t, "spearman(reversed)", spearman([]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}), -1, 1e-12)
	// No ties: 1 - 6Σd²/(n(n²-1)) with d = 0, 2, -1, -1: 1 - 36/60.
	near(t, "spearman(permutation)", spearman([]float64{1, 2, 3, 4}, []float64{1, 4, 2, 3}), 0.4, 1e-12)
	if !math.IsNaN(spearman([]float64{1, 2}, []float64{3, 3})) {
		t.Error("a constant series has no rank correlation: want NaN")
	}
}

func TestChiSquareKnownTable(t *testing.T) {
	// rows 30, 70; columns 40, 60; expected 12, 18, 28, 42.
	stat, df := chiSquare([][]int{{10, 20}, {30, 40}})
	near(t, "chi-square 2×2", stat, 4.0/12+4.0/18+4.0/28+4.0/42, 1e-12)
	if df != 1 {
		t.Errorf("df = %d, want 1", df)
	}
}

func TestChiSquarePKnownValues(t *testing.T) {
	// Reference values from the closed forms of the chi-square survival
	// function (even df: e^{-x/2} Σ (x/2)^k/k!; odd df: erfc plus a finite
	// sum), computed independently of gammaQ.
	for _, c := range []struct {
		x    float64
		df   int
		want float64
	}{
		{81, 81, 0.47910138169026883},
		{103.01, 81, 0.049996605513152895}, // the 5 % critical value of df 81
		{60, 81, 0.9612416464552193},
		{200, 81, 4.732682589050121e-12},
		{3.841, 1, 0.05001368376395671},
		{10, 4, 0.0404276819945128},
		{0.5, 3, 0.9188914116546758},
		{18.307, 10, 0.05000058909139812},
	} {
		got := chiSquareP(c.x, c.df)
		if math.Abs(got-c.want) > 1e-9*math.Max(1, c.want) && math.Abs(got-c.want)/c.want > 1e-7 {
			t.Errorf("chiSquareP(%v, %d) = %.12g, want %.12g", c.x, c.df, got, c.want)
		}
	}
	near(t, "chiSquareP(0, 81)", chiSquareP(0, 81), 1, 0)
}

func TestDecileTableFairAndFIFO(t *testing.T) {
	n := 10000
	arrival := make([]float64, n)
	fifo := make([]float64, n)
	for i := range arrival {
		arrival[i], fifo[i] = float64(i), float64(i)
	}
	// FIFO: everyone in the diagonal; the test must refuse it.
	tbl := decileTable(arrival, fifo)
	for i := range 10 {
		if tbl[i][i] != n/10 {
			t.Fatalf("FIFO: cell (%d,%d) = %d, want %d", i, i, tbl[i][i], n/10)
		}
	}
	stat, df := chiSquare(tableRows(tbl))
	if df != 81 || chiSquareP(stat, df) > 1e-12 {
		t.Errorf("FIFO: chi-square %.1f df %d p %.3g: want df 81 and p ~ 0", stat, df, chiSquareP(stat, df))
	}
	// A shuffle with a fixed seed: no correlation to speak of, a p-value
	// far from 0 (fixed seed: this is deterministic, not a flaky check).
	pos := make([]float64, n)
	perm := rand.New(rand.NewPCG(1, 2)).Perm(n)
	for i, p := range perm {
		pos[i] = float64(p)
	}
	if r := spearman(arrival, pos); math.Abs(r) > 0.05 {
		t.Errorf("shuffle: spearman %.4f, want near 0", r)
	}
	stat, df = chiSquare(tableRows(decileTable(arrival, pos)))
	if p := chiSquareP(stat, df); p < 0.001 {
		t.Errorf("shuffle: chi-square %.1f df %d p %.4f, want p not tiny", stat, df, p)
	}
}
