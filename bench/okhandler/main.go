// Command okhandler is the cheapest job handler there is: an HTTP server
// that reads each request's body and answers 200 at once. scripts/bench-worker
// points a worker's http handler at it, so the CPU the worker and
// nats-server spend per job is theirs, not the handler's.
//
//	go run ./bench/okhandler --listen 127.0.0.1:9000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	fs := flag.NewFlagSet("okhandler", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "`address` to listen on (port 0: any free port)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: okhandler [flags]\n\nAnswers every HTTP request 200 with an empty body, for scripts/bench-worker.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "okhandler:", err)
		os.Exit(1)
	}
	fmt.Printf("okhandler listening on %s\n", ln.Addr())
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "okhandler:", err)
		os.Exit(1)
	}
}
