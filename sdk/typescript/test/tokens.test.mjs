// Bearer tokens and tenants, without a gateway: a stand-in gRPC server
// records the metadata each kind of call arrives with, over a Unix socket
// and over TLS without a client certificate.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import * as grpc from "@grpc/grpc-js";
import { Gateway, Sandbox } from "../dist/index.js";
import { FileInfo, FileServiceService } from "../dist/gen/corral/v1/files.js";
import { ExecResponse, Sandbox as SandboxRecord, SandboxEvent, SandboxServiceService } from "../dist/gen/corral/v1/sandbox.js";
import { Tenant, TenantServiceService } from "../dist/gen/corral/v1/tenants.js";

const TOKEN = "corral_tk_0123456789abcdef";
const KEYS = ["authorization", "corral-tenant", "x-caller"];

// What the suite's environment says of a gateway does not reach these tests
// (node --test runs each file in a process of its own).
const scratch = mkdtempSync(join(tmpdir(), "corral-sdk-"));
for (const name of ["CORRAL_HOME", "CORRAL_TOKEN", "CORRAL_TENANT"]) delete process.env[name];
process.env.CORRAL_CONFIG = join(scratch, "no-config");
after(() => rmSync(scratch, { recursive: true, force: true }));

// serve starts a server answering a few calls of each kind; calls holds the metadata each came with.
async function serve(address, creds = grpc.ServerCredentials.createInsecure()) {
  const calls = [];
  const keep = (method, call) => {
    const md = {};
    for (const k of KEYS) {
      const v = call.metadata.get(k);
      if (v.length) md[k] = v.join(",");
    }
    calls.push([method, md]);
  };
  const server = new grpc.Server();
  const unimplemented = (svc) =>
    Object.fromEntries(Object.keys(svc).map((m) => [m, (_call, cb) => cb?.({ code: grpc.status.UNIMPLEMENTED })]));
  server.addService(SandboxServiceService, {
    ...unimplemented(SandboxServiceService),
    getSandbox(call, cb) {
      keep("getSandbox", call);
      cb(null, SandboxRecord.fromPartial({ name: call.request.name, id: "sb-1", phase: "ready" }));
    },
    waitSandbox(call) {
      keep("waitSandbox", call);
      call.write(SandboxEvent.fromPartial({ type: "REACHED" }));
      call.end();
    },
    execSandbox(call) {
      keep("execSandbox", call);
      call.on("data", () => {});
      call.on("end", () => {
        call.write(ExecResponse.fromPartial({}));
        call.end();
      });
    },
  });
  server.addService(FileServiceService, {
    ...unimplemented(FileServiceService),
    writeFile(call, cb) {
      keep("writeFile", call);
      call.on("data", () => {});
      call.on("end", () => cb(null, FileInfo.fromPartial({ name: "f" })));
    },
  });
  server.addService(TenantServiceService, {
    ...unimplemented(TenantServiceService),
    getTenant(call, cb) {
      keep("getTenant", call);
      cb(null, Tenant.fromPartial({ name: call.request.name || "acme" }));
    },
  });
  const port = await new Promise((resolve, reject) => server.bindAsync(address, creds, (err, p) => (err ? reject(err) : resolve(p))));
  return { server, calls, port };
}

const done = (resolve, reject) => (err, res) => (err ? reject(err) : resolve(res));
const drain = (stream) =>
  new Promise((resolve, reject) => {
    stream.on("data", () => {});
    stream.on("error", reject);
    stream.on("end", resolve);
  });

async function everyKindOfCall(gw) {
  const md = new grpc.Metadata();
  md.set("x-caller", "kept");
  await new Promise((res, rej) => gw.sandboxes.getSandbox({ name: "a" }, md, done(res, rej)));
  await drain(gw.sandboxes.waitSandbox({ name: "a", goal: "running", sinceRevision: 0 }));
  await new Promise((res, rej) => {
    const call = gw.files.writeFile(done(res, rej));
    call.end();
  });
  const exec = gw.sandboxes.execSandbox();
  exec.end();
  await drain(exec);
  const tenant = await new Promise((res, rej) => gw.tenants.getTenant({ name: "" }, done(res, rej)));
  assert.equal(tenant.name, "acme");
  assert.equal((await Sandbox.connect("a", gw)).id, "sb-1");
}

let sock;
before(async () => {
  sock = await serve(`unix:${scratch}/corral.sock`);
});
after(() => sock.server.forceShutdown());

test("the token and the tenant go on every call", async () => {
  const gw = new Gateway({ home: scratch, token: TOKEN, tenant: "acme" });
  try {
    await everyKindOfCall(gw);
  } finally {
    gw.close();
  }
  const want = { authorization: "Bearer " + TOKEN, "corral-tenant": "acme" };
  assert.deepEqual(sock.calls.map(([m]) => m), ["getSandbox", "waitSandbox", "writeFile", "execSandbox", "getTenant", "getSandbox"]);
  assert.deepEqual(sock.calls[0][1], { ...want, "x-caller": "kept" });
  for (const [, md] of sock.calls.slice(1)) assert.deepEqual(md, want);

  sock.calls.length = 0;
  const plain = new Gateway({ home: scratch }); // no token, no tenant: no metadata of theirs
  try {
    await everyKindOfCall(plain);
  } finally {
    plain.close();
  }
  assert.deepEqual(sock.calls[0][1], { "x-caller": "kept" });
  for (const [, md] of sock.calls.slice(1)) assert.deepEqual(md, {});
});

test("the token and the tenant come from the options, then the environment, then the context", async () => {
  const config = join(scratch, "config");
  writeFileSync(config, `current-context: local\ncontexts:\n  local:\n    gateway: unix://${scratch}/corral.sock\n    token: from-context\n    tenant: ctx-tenant\n`);
  process.env.CORRAL_CONFIG = config;
  const seen = async (opts) => {
    sock.calls.length = 0;
    const gw = new Gateway(opts);
    try {
      await new Promise((res, rej) => gw.tenants.getTenant({ name: "" }, done(res, rej)));
    } finally {
      gw.close();
    }
    return sock.calls[0][1];
  };
  try {
    assert.deepEqual(await seen(), { authorization: "Bearer from-context", "corral-tenant": "ctx-tenant" });
    assert.deepEqual(await seen({ context: "local" }), { authorization: "Bearer from-context", "corral-tenant": "ctx-tenant" });
    process.env.CORRAL_TOKEN = "from-env";
    process.env.CORRAL_TENANT = "env-tenant";
    assert.deepEqual(await seen(), { authorization: "Bearer from-env", "corral-tenant": "env-tenant" });
    assert.deepEqual(await seen({ token: TOKEN, tenant: "acme" }), { authorization: "Bearer " + TOKEN, "corral-tenant": "acme" });
    // an address given outright takes no context's token, only the environment's
    delete process.env.CORRAL_TOKEN;
    delete process.env.CORRAL_TENANT;
    assert.deepEqual(await seen({ address: `unix://${scratch}/corral.sock` }), {});
  } finally {
    delete process.env.CORRAL_TOKEN;
    delete process.env.CORRAL_TENANT;
    process.env.CORRAL_CONFIG = join(scratch, "no-config");
  }
});

let openssl = true;
try {
  execFileSync("openssl", ["version"], { stdio: "ignore" });
} catch {
  openssl = false;
}
const needsOpenSSL = { skip: !openssl && "needs openssl to make certificates" };

// selfSigned makes a certificate for name and its key (PEM files in scratch).
function selfSigned(name) {
  const [crt, key] = [join(scratch, name + ".crt"), join(scratch, name + ".key")];
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
    "-subj", "/CN=" + name, "-addext", "subjectAltName=DNS:" + name, "-keyout", key, "-out", crt], { stdio: "ignore" });
  return [crt, key];
}

test("an https gateway needs its CA and a client certificate or a token", needsOpenSSL, () => {
  const [ca] = selfSigned("gw.example");
  const [cert, key] = selfSigned("me");
  const address = "https://gw.example:7443";
  new Gateway({ address, ca, token: TOKEN }).close();
  new Gateway({ address, ca, cert, key }).close();
  new Gateway({ address, ca, cert, key, token: TOKEN, tenant: "acme" }).close();
  assert.throws(() => new Gateway({ address, ca }), /needs ca, cert and key .*, or ca and a bearer token/);
  assert.throws(() => new Gateway({ address, token: TOKEN }), /needs ca, cert and key .*, or ca and a bearer token/);
  assert.throws(() => new Gateway({ address, cert, key }), /needs ca, cert and key/);
  assert.throws(() => new Gateway({ address, ca, cert, token: TOKEN }), /a client certificate needs its key/);
  process.env.CORRAL_TOKEN = TOKEN;
  try {
    new Gateway({ address, ca }).close(); // the token of the environment will do
  } finally {
    delete process.env.CORRAL_TOKEN;
  }
  const config = join(scratch, "remote-config");
  writeFileSync(config, `current-context: remote\ncontexts:\n  remote:\n    gateway: ${address}\n    ca: ${ca}\n    token: ${TOKEN}\n`);
  process.env.CORRAL_CONFIG = config;
  try {
    const gw = new Gateway();
    assert.equal(gw.address, address);
    gw.close();
  } finally {
    process.env.CORRAL_CONFIG = join(scratch, "no-config");
  }
});

test("a token over TLS without a client certificate", needsOpenSSL, async () => {
  const [crt, key] = selfSigned("localhost");
  const creds = grpc.ServerCredentials.createSsl(null, [{ private_key: readFileSync(key), cert_chain: readFileSync(crt) }], false);
  const { server, calls, port } = await serve("localhost:0", creds);
  try {
    const gw = new Gateway({ address: `https://localhost:${port}`, ca: crt, token: TOKEN, tenant: "acme" });
    try {
      await everyKindOfCall(gw);
    } finally {
      gw.close();
    }
  } finally {
    server.forceShutdown();
  }
  assert.equal(calls.length, 6);
  for (const [, md] of calls) {
    assert.equal(md.authorization, "Bearer " + TOKEN);
    assert.equal(md["corral-tenant"], "acme");
  }
});
