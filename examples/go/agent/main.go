// Command agent does what an agent does with a sandbox, through the Go
// client package: take one from a warm pool, write a program into it, run
// it, read its result back, and delete the sandbox.
//
//	corral pool create warm --size 2      # once
//	go run ./examples/go/agent
package main

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/corral-sandbox/corral/client"
)

func main() {
	ctx := context.Background()
	c, err := client.New(client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create(ctx, "agent-task-go", &client.Spec{Labels: map[string]string{"task": "answer"}}, client.CreateOptions{Pool: "warm"}); err != nil {
		log.Fatal(client.Message(err))
	}
	defer c.Delete(ctx, "agent-task-go", client.DeleteOptions{Force: true})
	if _, err := c.WriteFile(ctx, "agent-task-go", "/sandbox/task.sh", strings.NewReader("echo $((6 * 7)) > answer.txt\n"), 0); err != nil {
		log.Fatal(client.Message(err))
	}
	run, err := c.Run(ctx, "agent-task-go", "sh", "task.sh")
	if err != nil || run.ExitCode != 0 {
		log.Fatalf("the task failed: %v %s", client.Message(err), run.Stderr)
	}
	answer, err := c.ReadFile(ctx, "agent-task-go", "/sandbox/answer.txt")
	if err != nil {
		log.Fatal(client.Message(err))
	}
	fmt.Println("the answer is", strings.TrimSpace(string(answer)))
}
