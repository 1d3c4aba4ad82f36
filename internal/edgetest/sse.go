package edgetest

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ReadHead reads an HTTP/1.1 answer's status line and headers (names in
// lower case) and, when it has a Content-Length, its body: the head of an
// event stream, or the whole of a non-stream answer.
func ReadHead(r *bufio.Reader) (status int, headers map[string]string, body string, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, "", fmt.Errorf("status line: %w", err)
	}
	if f := strings.Fields(line); len(f) >= 2 {
		status, _ = strconv.Atoi(f[1])
	}
	headers = map[string]string{}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return status, headers, "", fmt.Errorf("headers: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		k, v, _ := strings.Cut(line, ":")
		headers[strings.ToLower(k)] = strings.TrimSpace(v)
	}
	if n, err := strconv.Atoi(headers["content-length"]); err == nil {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return status, headers, "", fmt.Errorf("body: %w", err)
		}
		body = string(b)
	}
	return status, headers, body, nil
}

// NextEvent reads the next server-sent event and returns its data,
// skipping comments (heartbeats); at the end of the stream it returns ""
// and the reader's error (io.EOF when the server closed it).
func NextEvent(r *bufio.Reader) (string, error) {
	var data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		case line == "":
			if data != "" {
				return data, nil
			}
		}
	}
}
