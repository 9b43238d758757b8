// Command credprobe is what the credentials tests run inside a sandbox: a
// client that sends the placeholders its environment holds, through the
// egress proxy, the way SDKs do, and where they do not belong.
//
//	credprobe header METHOD URL   $GITHUB_TOKEN as "Authorization: Bearer"
//	credprobe body URL            POST $GITHUB_TOKEN in the body
//	credprobe tunnel HOST:PORT    CONNECT, then plain HTTP with the header
//	credprobe sigv4 URL           PUT signed with $AWS_ACCESS_KEY_ID and
//	                              $AWS_SECRET_ACCESS_KEY
//
// Each prints the status and the first line of the body, or what ended
// the connection.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: credprobe header METHOD URL | body URL | tunnel HOST:PORT | sigv4 URL")
		os.Exit(2)
	}
	token := os.Getenv("GITHUB_TOKEN")
	var req *http.Request
	var err error
	switch os.Args[1] {
	case "header":
		req, err = http.NewRequest(os.Args[2], os.Args[3], nil)
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	case "body":
		req, err = http.NewRequest("POST", os.Args[2], strings.NewReader(`{"token":"`+token+`"}`))
	case "sigv4":
		const body = "object"
		req, err = http.NewRequest("PUT", os.Args[2], strings.NewReader(body))
		if err == nil {
			sum := sha256.Sum256([]byte(body))
			hash := hex.EncodeToString(sum[:])
			req.Header.Set("X-Amz-Content-Sha256", hash)
			creds := aws.Credentials{AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}
			err = v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, "s3", "us-east-1", time.Now())
		}
	case "tunnel":
		tunnel(os.Args[2], token)
		return
	default:
		os.Exit(2)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 4096)).ReadString('\n')
	fmt.Printf("%d %s\n", resp.StatusCode, strings.TrimSpace(line))
}

// tunnel opens a CONNECT tunnel through the proxy and sends a plain HTTP
// request with the token in it.
func tunnel(target, token string) {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(os.Getenv("HTTP_PROXY"), "http://"), 5*time.Second)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		fmt.Println("connect refused:", err, resp)
		os.Exit(1)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", target, token)
	if line, err := br.ReadString('\n'); err != nil {
		fmt.Println("closed:", err)
	} else {
		fmt.Println("answered:", strings.TrimSpace(line))
	}
}
