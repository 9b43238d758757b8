package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"

	"github.com/corral-sandbox/corral/client"
)

// Create a sandbox, run a command in it and read its output: the local
// gateway, reached as `corral` reaches it.
func Example() {
	ctx := context.Background()
	c, err := client.New(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create(ctx, "demo", &client.Spec{Command: []string{"sleep", "infinity"}}, client.CreateOptions{}); err != nil {
		log.Fatal(client.Message(err))
	}
	out, err := c.Run(ctx, "demo", "uname", "-a")
	if err != nil {
		log.Fatal(client.Message(err))
	}
	fmt.Printf("%s(exit %d)\n", out.Stdout, out.ExitCode)
}

// A remote gateway over mutual TLS, with the files `corral gateway
// client-cert` wrote; or a context that names them (corral context add).
func ExampleNew() {
	c, err := client.New(client.Options{
		Gateway: "https://gateway.internal:7443",
		CA:      "ca.crt", Cert: "agent.crt", Key: "agent.key",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	staging, err := client.New(client.Options{Context: "staging"})
	if err != nil {
		log.Fatal(err)
	}
	defer staging.Close()
}

// A command with input, its output streamed as it comes.
func ExampleClient_Exec() {
	c, err := client.New(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	code, err := c.Exec(context.Background(), "demo", []string{"sh", "-c", "tr a-z A-Z"}, client.ExecOptions{
		Stdin:  strings.NewReader("shout\n"),
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	if err != nil {
		log.Fatal(client.Message(err))
	}
	fmt.Println("exit", code)
}

// Files in and out, as docker cp copies them; and one file written whole.
func ExampleClient_CopyTo() {
	ctx := context.Background()
	c, err := client.New(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.CopyTo(ctx, "./project", "demo", "/sandbox", client.CopyOptions{}); err != nil {
		log.Fatal(client.Message(err))
	}
	if _, err := c.WriteFile(ctx, "demo", "/sandbox/project/.env", strings.NewReader("MODE=test\n"), 0o600); err != nil {
		log.Fatal(client.Message(err))
	}
	if err := c.CopyFrom(ctx, "demo", "/sandbox/project/out", "./out", client.CopyOptions{}); err != nil {
		log.Fatal(client.Message(err))
	}
}

// A connection to a server listening on the sandbox's own loopback.
func ExampleClient_DialPort() {
	c, err := client.New(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	conn, err := c.DialPort(context.Background(), "demo", 8080)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n")
	reply, err := io.ReadAll(conn)
	if err != nil {
		log.Fatal(client.Message(err))
	}
	fmt.Printf("%s", reply)
}

// Stop, start and delete wait until the sandbox is there, as the command
// line does; Detach returns once the request is recorded.
func ExampleClient_Delete() {
	c, err := client.New(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Delete(context.Background(), "demo", client.DeleteOptions{}); err != nil {
		log.Fatal(client.Message(err))
	}
}
