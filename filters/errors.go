package filters

import "encoding/json"

// ErrorBody renders {"code": ..., "message": ...}. Used at build time only.
func ErrorBody(code, message string) []byte {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, message})
	return b
}
