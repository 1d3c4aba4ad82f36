package yamlmerge

import (
	"reflect"
	"testing"
)

func TestInto(t *testing.T) {
	dst := map[string]any{
		"listen":  map[string]any{"addr": ":8080", "read_timeout": "5s"},
		"filters": []any{"a", "b"},
		"node_id": 1,
	}
	Into(dst, map[string]any{
		"listen":  map[string]any{"addr": "127.0.0.1:0"},
		"filters": []any{"c"},
		"redis":   map[string]any{"addr": "127.0.0.1:6379"},
		"node_id": map[string]any{"not": "a mapping before"},
	})
	want := map[string]any{
		"listen":  map[string]any{"addr": "127.0.0.1:0", "read_timeout": "5s"},
		"filters": []any{"c"},
		"redis":   map[string]any{"addr": "127.0.0.1:6379"},
		"node_id": map[string]any{"not": "a mapping before"},
	}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("got %v\nwant %v", dst, want)
	}
}
