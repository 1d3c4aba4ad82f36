package main

import (
	"errors"
	"strings"

	"flashgate/conf/field"
)

// splitErrors lists field errors one per line for `proxy -t`.
func splitErrors(err error) []string {
	var fe field.Errors
	if errors.As(err, &fe) {
		prefix := strings.TrimSuffix(err.Error(), fe.Error())
		out := make([]string, 0, len(fe))
		for _, e := range fe {
			out = append(out, prefix+e.Error())
		}
		return out
	}
	return []string{err.Error()}
}
