// What an agent does with a sandbox: take one from a warm pool, write a
// program into it, run it, read its result back, and delete the sandbox.
//
//   corral pool create warm --size 2      # once
//   node examples/typescript/agent.mjs    # with the SDK installed (npm install ./sdk/typescript)
import { Sandbox } from "@corral-sandbox/sdk";

const sb = await Sandbox.create({ name: "agent-task-ts", pool: "warm", labels: { task: "answer" } });
try {
  await sb.files.write("task.sh", "echo $((6 * 7)) > answer.txt\n");
  const run = await sb.exec(["sh", "task.sh"]);
  if (run.exitCode !== 0) throw new Error(`the task failed: ${run.stderr}`);
  console.log("the answer is", (await sb.files.read("answer.txt")).toString().trim());
} finally {
  await sb.delete();
}
