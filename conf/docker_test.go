package conf

import (
	"os"
	"reflect"
	"sort"
	"testing"

	"gopkg.in/yaml.v3"
)

// The image's config is the shipped one but for the settings a container
// needs, so the image runs the same zero-setup demo as `proxy` does.
func TestDockerConfigIsEdgeYAMLForAContainer(t *testing.T) {
	read := func(name string) map[string]any {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	edge, image := read("edge.yaml"), read("docker.yaml")
	want := map[string]any{
		"admin":    map[string]any{"addr": "env:FLASHGATE_ADMIN_ADDR", "token": "env:FLASHGATE_ADMIN_TOKEN"},
		"data_dir": "/var/lib/flashgate",
	}
	for k, v := range want {
		if !reflect.DeepEqual(image[k], v) {
			t.Errorf("docker.yaml %s: %v, want %v", k, image[k], v)
		}
		delete(edge, k)
		delete(image, k)
	}
	var differ []string
	for k := range edge {
		if !reflect.DeepEqual(edge[k], image[k]) {
			differ = append(differ, k)
		}
	}
	for k := range image {
		if _, ok := edge[k]; !ok {
			differ = append(differ, k)
		}
	}
	sort.Strings(differ)
	if len(differ) > 0 {
		t.Errorf("docker.yaml differs from edge.yaml in %v: change both (the image runs edge.yaml but for admin and data_dir)", differ)
	}

	t.Setenv("FLASHGATE_ADMIN_ADDR", "0.0.0.0:9901")
	t.Setenv("FLASHGATE_ADMIN_TOKEN", "0123456789abcdef0123")
	b, _ := os.ReadFile("docker.yaml")
	if _, err := Parse(b, "docker.yaml"); err != nil {
		t.Fatalf("docker.yaml with the image's environment: %v", err)
	}
}
