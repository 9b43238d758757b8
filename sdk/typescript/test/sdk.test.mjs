// The TypeScript SDK against a real gateway, which cmd/corral's
// TestTypeScriptSDK starts: CORRAL_HOME is its home (native driver), and
// CORRAL_GATEWAY_URL, CORRAL_CA, CORRAL_CERT and CORRAL_KEY its TLS
// listener and a client certificate of its CA; a warm pool "warm" is ready;
// CORRAL_TEST_MEMBER_TOKEN is a member token of tenant "sdk".
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { join, dirname } from "node:path";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as corral from "../dist/index.js";

const { Sandbox, Gateway } = corral;
const here = dirname(fileURLToPath(import.meta.url));

test("lifecycle, exec, files, logs and ports", async () => {
  const sb = await Sandbox.create({ name: "ts-life", command: ["sh", "-c", "echo started; exec /bin/busybox nc -ll -p 7070 -e /bin/cat"] });
  try {
    assert.equal(sb.phase, "ready");
    assert.deepEqual(await sb.exec(["echo", "hello", "typescript"]), { stdout: "hello typescript\n", stderr: "", exitCode: 0 });
    assert.deepEqual(await sb.exec("echo $X >&2; pwd; exit 3", { env: { X: "x1" }, cwd: "/tmp" }), { stdout: "/tmp\n", stderr: "x1\n", exitCode: 3 });
    assert.equal((await sb.exec(["cat"], { stdin: "through stdin" })).stdout, "through stdin");
    assert.equal((await sb.exec(["/no/such/program"])).exitCode, 127);
    const parts = [];
    for await (const p of sb.execStream(["sh", "-c", "echo a; echo b >&2"])) parts.push(p);
    assert.deepEqual(parts.at(-1), { stream: "exit", exitCode: 0 });

    await sb.files.mkdir("dir");
    const info = await sb.files.write("dir/note.txt", "a note\n", 0o600);
    assert.equal(info.size, 7);
    assert.equal(info.mode & 0o777, 0o600);
    assert.equal((await sb.files.read("/sandbox/dir/note.txt")).toString(), "a note\n");
    assert.deepEqual((await sb.files.list("dir")).map((f) => f.name), ["note.txt"]);
    assert.equal((await sb.files.stat("dir")).type, "dir");
    await sb.files.remove("dir", { recursive: true });
    await assert.rejects(sb.files.stat("dir"), corral.NotFoundError);

    assert.match(await sb.logs(), /started/);
    assert.equal((await sb.ports.forward(7070, "ping\n")).toString(), "ping\n");
    assert.match(await sb.ports.expose(7070), /^127\.0\.0\.1:\d+$/);

    await sb.stop();
    assert.equal(sb.phase, "stopped");
    await sb.start();
    assert.equal(sb.phase, "ready");
  } finally {
    await sb.delete();
  }
  await assert.rejects(Sandbox.connect("ts-life"), corral.NotFoundError);
});

// with runs fn on a new sandbox, deleting it after (the await using of
// TypeScript and Node 24, which Node 20's JavaScript lacks: see using.test.ts).
async function withSandbox(opts, fn) {
  const sb = await Sandbox.create(opts);
  try {
    await fn(sb);
  } finally {
    await sb[Symbol.asyncDispose]();
  }
}

test("pause, resume, a snapshot, a fork and a sandbox made from the snapshot", async () => {
  const sb = await Sandbox.create({ name: "ts-snap" });
  try {
    await sb.files.write("state.txt", "before\n");
    await assert.rejects(sb.pause({ memory: true }), (e) => e instanceof corral.FailedPreconditionError && e.reason.includes("memory_snapshots"));
    await sb.pause();
    assert.equal(sb.phase, "paused");
    await assert.rejects(sb.exec(["true"]), corral.FailedPreconditionError);
    await sb.resume();
    assert.equal(sb.phase, "ready");
    const snap = await sb.snapshot("ts-base");
    assert.deepEqual([snap.name, snap.sandbox, Number(snap.files)], ["ts-base", "ts-snap", 1]);
    const forks = await sb.fork(2, { namePrefix: "ts-try" });
    try {
      assert.deepEqual(forks.map((f) => f.name), ["ts-try-1", "ts-try-2"]);
      await forks[0].files.write("state.txt", "changed\n");
      assert.equal((await forks[1].files.read("state.txt")).toString(), "before\n"); // each its own copy
    } finally {
      for (const f of forks) await f.delete({ force: true });
    }
    const back = await Sandbox.create({ name: "ts-back", fromSnapshot: "ts-base", gateway: sb.gateway });
    try {
      assert.equal((await back.files.read("state.txt")).toString(), "before\n");
    } finally {
      await back.delete({ force: true });
    }
    await new Promise((resolve, reject) => sb.gateway.snapshots.deleteSnapshot({ name: "ts-base" }, (err) => (err ? reject(err) : resolve())));
  } finally {
    await sb.delete({ force: true });
  }
});

test("an exec with a timeout", () =>
  withSandbox({ name: "ts-timeout" }, async (sb) => {
    await assert.rejects(sb.exec(["sleep", "30"], { timeout: 1 }), corral.TimeoutError);
    assert.equal((await sb.exec(["true"])).exitCode, 0);
  }));

test("typed errors with the gateway's reason", async () => {
  await assert.rejects(Sandbox.connect("no-such-sandbox"), (e) => e instanceof corral.NotFoundError && e.reason === 'sandbox "no-such-sandbox" not found');
  await assert.rejects(Sandbox.create({ name: "Bad_Name" }), corral.InvalidArgumentError);
  await withSandbox({ name: "ts-errors" }, async (sb) => {
    await assert.rejects(sb.exec(["x".repeat(1 << 20)]), corral.InvalidArgumentError);
    await assert.rejects(Sandbox.create({ name: "ts-errors" }), corral.AlreadyExistsError);
  });
  const nowhere = new Gateway({ home: "/nonexistent" });
  await assert.rejects(Sandbox.connect("x", nowhere), (e) => e instanceof corral.UnavailableError && e.reason.includes("is `corral gateway` running?"));
  nowhere.close();
});

test("bad input and 100 calls at once", () =>
  withSandbox({ name: "ts-many" }, async (sb) => {
    await assert.rejects(sb.files.read("../etc/passwd"), (e) => e instanceof corral.InvalidArgumentError && e.reason.includes('".." is not taken'));
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => sb.exec(["echo", String(i)])));
    assert.deepEqual(results.map((r) => r.stdout), Array.from({ length: 100 }, (_, i) => `${i}\n`));
    assert.equal((await sb.exec(["true"])).exitCode, 0);
  }));

test("a pool claim", () =>
  withSandbox({ name: "ts-claimed", pool: "warm", labels: { who: "typescript" } }, async (sb) => {
    assert.equal(sb.phase, "ready");
    assert.equal((await sb.exec(["echo", "from the pool"])).stdout, "from the pool\n");
  }));

test("the remote form over mutual TLS", async () => {
  const env = process.env;
  const gateway = new Gateway({ address: env.CORRAL_GATEWAY_URL, ca: env.CORRAL_CA, cert: env.CORRAL_CERT, key: env.CORRAL_KEY });
  try {
    await withSandbox({ name: "ts-remote", gateway }, async (sb) => {
      assert.equal((await sb.exec(["echo", "over mTLS"])).stdout, "over mTLS\n");
    });
  } finally {
    gateway.close();
  }
  assert.throws(() => new Gateway({ address: env.CORRAL_GATEWAY_URL }), /needs ca, cert and key/);
});

// call makes a call of a raw client (gw.sandboxes, gw.tenants), bounded in
// time; it rejects with the gRPC error.
function call(client, method, request) {
  return new Promise((res, rej) =>
    client[method](request, new grpc.Metadata(), { deadline: Date.now() + 30_000 }, (err, out) => (err ? rej(err) : res(out))));
}

test("a member token sees and acts only in its tenant", { timeout: 180_000 }, async () => {
  const env = process.env;
  // the local admin, in tenant default: the pool's member (it refills after a claim)
  const admin = new Gateway();
  let pooled = [];
  try {
    for (const deadline = Date.now() + 60_000; !pooled.length && Date.now() < deadline; ) {
      const { sandboxes } = await call(admin.sandboxes, "listSandboxes", { limit: 0, pageToken: "", labels: { "corral.pool": "warm" }, phase: "" });
      pooled = sandboxes.filter((s) => s.tenant === "default").map((s) => s.id);
      if (!pooled.length) await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    admin.close();
  }
  assert.ok(pooled.length, 'the pool "warm" has no member');

  const gateway = new Gateway({ address: env.CORRAL_GATEWAY_URL, ca: env.CORRAL_CA, token: env.CORRAL_TEST_MEMBER_TOKEN });
  try {
    await withSandbox({ name: "ts-member", gateway }, async (sb) => {
      assert.equal((await call(gateway.sandboxes, "getSandbox", { name: sb.id })).tenant, "sdk");
      assert.equal((await sb.exec(["echo", "hi"], { timeout: 30 })).stdout, "hi\n");

      const { sandboxes } = await call(gateway.sandboxes, "listSandboxes", { limit: 0, pageToken: "", labels: {}, phase: "" });
      assert.ok(sandboxes.some((s) => s.id === sb.id));
      assert.deepEqual([...new Set(sandboxes.map((s) => s.tenant))], ["sdk"]);
      assert.ok(!sandboxes.some((s) => s.id === pooled[0]));

      const tenant = await call(gateway.tenants, "getTenant", { name: "" });
      assert.equal(tenant.name, "sdk");
      assert.ok(tenant.usage.sandboxes >= 1, JSON.stringify(tenant));

      await assert.rejects(call(gateway.tenants, "listTenants", {}), (e) => e.code === grpc.status.PERMISSION_DENIED);
      await assert.rejects(Sandbox.connect(pooled[0], gateway), corral.NotFoundError);
    });
    await assert.rejects(Sandbox.connect("ts-member", gateway), corral.NotFoundError); // deleted at the end
  } finally {
    gateway.close();
  }
});

test("files.watch reports a change", () =>
  withSandbox({ name: "ts-watch" }, async (sb) => {
    const changes = sb.files.watch("/sandbox");
    assert.equal((await changes.next()).value.type, "ready");
    await sb.files.write("watched.txt", "x");
    for (;;) {
      const { value, done } = await changes.next();
      assert.ok(!done, "the watch ended before the write was seen");
      if (value.path.endsWith("watched.txt")) break;
    }
    await changes.return();
  }));

test("a context of the command line's configuration", async () => {
  const env = process.env;
  const dir = mkdtempSync(join(tmpdir(), "corral-ctx-"));
  const config = join(dir, "config");
  writeFileSync(config, `current-context: local\ncontexts:\n  remote:\n    gateway: ${env.CORRAL_GATEWAY_URL}\n    ca: ${env.CORRAL_CA}\n    cert: ${env.CORRAL_CERT}\n    key: ${env.CORRAL_KEY}\n  local:\n    gateway: unix:///nonexistent/corral.sock\n`);
  const saved = env.CORRAL_CONFIG;
  env.CORRAL_CONFIG = config;
  try {
    const gateway = new Gateway({ context: "remote" });
    assert.equal(gateway.address, env.CORRAL_GATEWAY_URL);
    await withSandbox({ name: "ts-context", gateway }, async (sb) => {
      assert.equal((await sb.exec(["echo", "through a context"])).stdout, "through a context\n");
    });
    gateway.close();
    assert.throws(() => new Gateway({ context: "gone" }), /context "gone" not found/);
  } finally {
    if (saved === undefined) delete env.CORRAL_CONFIG;
    else env.CORRAL_CONFIG = saved;
  }
});

// runs a script of the repository as a user would, with the SDK as a package
function runScript(source) {
  const dir = mkdtempSync(join(tmpdir(), "corral-ts-"));
  const file = join(dir, "script.mjs");
  writeFileSync(file, source.replaceAll('"@corral-sandbox/sdk"', JSON.stringify(join(here, "..", "dist", "index.js"))));
  return execFileSync("node", [file], { encoding: "utf8" });
}

test("the README's example runs as written", () => {
  const readme = readFileSync(join(here, "..", "README.md"), "utf8");
  const example = readme.match(/```js\n([\s\S]*?)```/)[1];
  assert.equal(runScript(example), "hello from the sandbox\n\n");
});

test("examples/typescript/agent.mjs runs as written", () => {
  const source = readFileSync(join(here, "..", "..", "..", "examples", "typescript", "agent.mjs"), "utf8");
  assert.equal(runScript(source), "the answer is 42\n");
});
