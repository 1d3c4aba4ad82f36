package push

import "testing"

func TestAutoMaxStreams(t *testing.T) {
	if n := autoMaxStreams(); n < 1 || n > maxDefaultStreams {
		t.Fatalf("automatic max_streams %d", n)
	}
}
