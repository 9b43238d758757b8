// Command egressprobe is what the egress tests run inside a sandbox: a
// client that uses the proxy and the CA bundle the sandbox's environment
// names, as common tools do, or that ignores them.
//
//	egressprobe get URL      GET through the proxy: the status line and body
//	egressprobe post URL     POST through the proxy
//	egressprobe hold URL     GET a body that never ends; print how it ended
//	egressprobe dial ADDR    a direct TCP connection, ignoring the proxy
//	egressprobe flood N      open N connections to the proxy, send a refused
//	                         request with a long path on each, keep them 5 s
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
	"strconv"
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
	case "flood":
		n, _ := strconv.Atoi(arg)
		opened, failed := 0, 0
		var conns []net.Conn
		path := "/" + strings.Repeat("a", 60<<10)
		for range n {
			c, err := net.DialTimeout("tcp", "127.0.0.1:999", 2*time.Second)
			if err != nil {
				failed++
				continue
			}
			opened++
			fmt.Fprintf(c, "GET http://127.0.0.1:999%s HTTP/1.1\r\nHost: 127.0.0.1:999\r\n\r\n", path)
			conns = append(conns, c)
		}
		time.Sleep(5 * time.Second)
		fmt.Printf("opened %d, failed %d\n", opened, failed)
	default:
		os.Exit(2)
	}
}
