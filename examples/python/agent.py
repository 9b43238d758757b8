"""What an agent does with a sandbox: take one from a warm pool, write a
program into it, run it, read its result back, and delete the sandbox.

    corral pool create warm --size 2      # once
    PYTHONPATH=sdk/python python3 examples/python/agent.py
"""

from corral import Sandbox

with Sandbox.create("agent-task", pool="warm", labels={"task": "answer"}) as sb:
    sb.files.write("task.sh", "echo $((6 * 7)) > answer.txt\n")
    run = sb.exec(["sh", "task.sh"])
    if run.exit_code != 0:
        raise SystemExit(f"the task failed: {run.stderr}")
    print("the answer is", sb.files.read("answer.txt").decode().strip())
