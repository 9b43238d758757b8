// Command egressprobe is what the egress tests run inside a sandbox: a
// client that uses the proxy and the CA bundle the sandbox's environment
// names, as common tools do, or that ignores them.
//
//	egressprobe get URL      GET through the proxy: the status line and body
//	egressprobe post URL     POST through the proxy
//	egressprobe hold URL     GET a body that never ends; print how it ended
//	egressprobe dial ADDR    a direct TCP connection, ignoring the proxy
//	egressprobe serve ADDR   serve the working directory's files on ADDR
//	                         (one process: no child reads a connection it did
//	                         not accept, which gVisor's hostinet gets wrong)
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: egressprobe get|post|hold|dial|serve ARG")
		os.Exit(2)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	arg := os.Args[2]
	switch os.Args[1] {
	case "serve":
		err := http.ListenAndServe(arg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			data, err := os.ReadFile(filepath.Join(".", filepath.Clean("/"+r.URL.Path)))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Write(data)
		}))
		fmt.Println("error:", err)
		os.Exit(1)
	case "get", "post":
		var resp *http.Response
		var err error
		if os.Args[1] == "get" {
			resp, err = client.Get(arg)
		} else {
			resp, err = client.Post(arg, "text/plain", strings.NewReader("hello"))
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	case "hold":
		client.Timeout = 0
		resp, err := client.Get(arg)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("holding", resp.StatusCode)
		n, err := io.Copy(io.Discard, resp.Body)
		fmt.Printf("closed after %d bytes: %v\n", n, err)
	case "dial":
		start := time.Now()
		c, err := net.DialTimeout("tcp", arg, 5*time.Second)
		if err == nil {
			c.Close()
			fmt.Println("connected")
			os.Exit(1)
		}
		fmt.Printf("refused after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
	default:
		os.Exit(2)
	}
}
