// await using, as a TypeScript program writes it (compiled by
// tsconfig.test.json): the sandbox is deleted at the block's end.
import { test } from "node:test";
import assert from "node:assert/strict";
import { NotFoundError, Sandbox } from "../dist/index.js";

test("await using deletes the sandbox at the block's end", async () => {
  {
    await using sb = await Sandbox.create({ name: "ts-using" });
    assert.equal((await sb.exec(["true"])).exitCode, 0);
  }
  await assert.rejects(Sandbox.connect("ts-using"), NotFoundError);
});
