package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAdmissionRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var at []time.Time
	// 10 a second for 30 s, and a burst of 20 more in the 10th second.
	for i := range 300 {
		at = append(at, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	for i := range 20 {
		at = append(at, t0.Add(10*time.Second+time.Duration(i)*time.Millisecond))
	}
	perMin, busiest := admissionRate(at, 10*time.Second)
	if want := float64(319) / (29.9 / 60); perMin < want-0.01 || perMin > want+0.01 {
		t.Errorf("per minute %.2f, want %.2f", perMin, want)
	}
	if want := float64(120) * 6; busiest != want {
		t.Errorf("busiest 10 s %.0f/min, want %.0f (100 + the burst of 20)", busiest, want)
	}
	if p, b := admissionRate(at[:1], 10*time.Second); p != 0 || b != 0 {
		t.Errorf("one admission: %v %v, want no rate", p, b)
	}
}

func TestRouteRoomScenarioChecked(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("scenarios", "routeroom.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := parseScenario(data, "routeroom.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.RouteRoom == nil || sc.RouteRoom.Edges != 2 {
		t.Fatalf("route_room %+v", sc.RouteRoom)
	}
	if _, err := parseScenario(data, "routeroom.yaml", append(sc.quickSets(), "route_room.session=3s")); err == nil ||
		!strings.Contains(err.Error(), "route_room.session") {
		t.Errorf("a session shorter than the stay: %v, want route_room.session refused", err)
	}
}
