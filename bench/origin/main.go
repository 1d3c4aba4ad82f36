package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	size := flag.Int("size", 256, "response body size in bytes (at least 32)")
	flag.Parse()

	body := makeBody(*size)
	var (
		hdrOrigin   = []byte("X-Origin")
		valOrigin   = []byte("flashgate-bench")
		hdrEcho     = []byte("X-Bench-Echo")
		contentJSON = []byte("application/json")
		echoed      = [][2]string{{"X-Forwarded-For", "X-Echo-Forwarded-For"}, {"X-Real-IP", "X-Echo-Real-IP"}, {"X-Forwarded-Proto", "X-Echo-Forwarded-Proto"}, {"Host", "X-Echo-Host"}, {"Connection", "X-Echo-Connection"}}
	)
	handler := func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentTypeBytes(contentJSON)
		ctx.Response.Header.SetBytesKV(hdrOrigin, valOrigin)
		if bytes.Equal(ctx.Request.Header.PeekBytes(hdrEcho), []byte("1")) {
			for _, e := range echoed {
				ctx.Response.Header.SetBytesV(e[1], ctx.Request.Header.Peek(e[0]))
			}
		}
		ctx.Response.SetBodyRaw(body)
	}
	srv := &fasthttp.Server{
		Handler:       handler,
		Name:          "bench-origin",
		IdleTimeout:   5 * time.Minute,
		NoDefaultDate: false,
		Concurrency:   1 << 18,
	}
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		srv.Shutdown()
	}()
	log.Printf("bench origin on %s, %d-byte body", *addr, len(body))
	if err := srv.ListenAndServe(*addr); err != nil {
		log.Fatal(err)
	}
}

// makeBody builds a JSON object of exactly n bytes: {"origin":"bench","pad":"xxx…"}.
func makeBody(n int) []byte {
	head := `{"origin":"bench","pad":"`
	tail := `"}`
	if n < len(head)+len(tail)+1 {
		n = len(head) + len(tail) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, head...)
	for len(b) < n-len(tail) {
		b = append(b, byte('a'+len(b)%26))
	}
	b = append(b, tail...)
	if len(b) != n {
		panic(fmt.Sprint("body size ", len(b)))
	}
	return b
}
