package main

import (
	"fmt"
	"io"
)

func cmdCompare(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "bench compare: not yet")
	return 2
}
