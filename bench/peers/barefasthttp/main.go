package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9100", "listen address")
	flag.Parse()
	body := []byte(`{"code":"SOLD_OUT","message":"sold out"}`)
	contentJSON := []byte("application/json")
	noStore := []byte("no-store")
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(fasthttp.StatusGone)
			ctx.Response.Header.SetContentTypeBytes(contentJSON)
			ctx.Response.Header.SetBytesV(fasthttp.HeaderCacheControl, noStore)
			ctx.SetBody(body)
		},
		Name:        "barefasthttp",
		IdleTimeout: 5 * time.Minute,
		Concurrency: 1 << 18,
	}
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		srv.Shutdown()
	}()
	log.Printf("barefasthttp on %s: 410 %s", *addr, body)
	if err := srv.ListenAndServe(*addr); err != nil {
		log.Fatal(err)
	}
}
