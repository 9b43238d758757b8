// The official TypeScript MCP client against corral: `corral mcp` over
// stdio, and the gateway's /mcp over HTTPS with a client certificate.
// cmd/corral's TestMCPWithTheOfficialTypeScriptClient runs it with a
// gateway started: CORRAL_BIN and CORRAL_HOME name the binary and its
// home; CORRAL_MCP_URL, CORRAL_CA, CORRAL_CERT and CORRAL_KEY the TLS
// endpoint and a client certificate of its CA.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Agent, fetch as undiciFetch } from "undici";

const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run this from cmd/corral's test`);
  return v;
};

// call runs a tool and returns its structured result; a tool error fails.
async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.ok(!res.isError, `${name}: ${JSON.stringify(res.content)}`);
  return res.structuredContent;
}

// agentSession is what an agent does through the tools.
async function agentSession(client, name) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const want of ["sandbox_create", "sandbox_exec", "fs_write", "fs_read", "sandbox_delete"]) {
    assert.ok(names.includes(want), `no ${want} among ${names}`);
  }
  const sb = await call(client, "sandbox_create", { name });
  assert.equal(sb.phase, "ready");
  const out = await call(client, "sandbox_exec", { name, command: ["echo", "hello", "from", "typescript"] });
  assert.equal(out.stdout, "hello from typescript\n");
  assert.equal(out.exit_code, 0);
  await call(client, "fs_write", { name, path: "note.txt", content: "written by the official client\n" });
  const read = await call(client, "fs_read", { name, path: "/sandbox/note.txt" });
  assert.equal(read.content, "written by the official client\n");
  const missing = await client.callTool({ name: "sandbox_get", arguments: { name: "no-such-sandbox" } });
  assert.ok(missing.isError);
  assert.equal(missing.content[0].text, 'sandbox "no-such-sandbox" not found');
  await call(client, "sandbox_delete", { name });
}

test("corral mcp over stdio", async () => {
  const transport = new StdioClientTransport({ command: env("CORRAL_BIN"), args: ["--home", env("CORRAL_HOME"), "mcp"] });
  const client = new Client({ name: "corral-test", version: "1.0.0" });
  await client.connect(transport);
  try {
    await agentSession(client, "ts-stdio");
  } finally {
    await client.close();
  }
});

// https is the fetch of a client with the test's certificate (or none).
function https(withCert) {
  const connect = { ca: readFileSync(env("CORRAL_CA")) };
  if (withCert) {
    connect.cert = readFileSync(env("CORRAL_CERT"));
    connect.key = readFileSync(env("CORRAL_KEY"));
  }
  const dispatcher = new Agent({ connect });
  return (url, init) => undiciFetch(url, { ...init, dispatcher });
}

test("the gateway's /mcp over HTTPS with a client certificate", async () => {
  const transport = new StreamableHTTPClientTransport(new URL(env("CORRAL_MCP_URL")), { fetch: https(true) });
  const client = new Client({ name: "corral-test", version: "1.0.0" });
  await client.connect(transport);
  try {
    await agentSession(client, "ts-https");
  } finally {
    await client.close();
  }
});

test("the gateway's /mcp refuses a client without a certificate", async () => {
  const transport = new StreamableHTTPClientTransport(new URL(env("CORRAL_MCP_URL")), { fetch: https(false) });
  const client = new Client({ name: "corral-test", version: "1.0.0" });
  await assert.rejects(client.connect(transport));
});
