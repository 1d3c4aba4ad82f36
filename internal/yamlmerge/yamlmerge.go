package yamlmerge

// Into merges src into dst: mappings merge key by key, recursively; any
// other value of src (a scalar, a list) replaces dst's.
func Into(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				Into(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}
