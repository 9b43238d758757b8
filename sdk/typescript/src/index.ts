// The TypeScript SDK of corral: sandboxes for untrusted code on a corral
// gateway. The wire (src/gen) is generated from proto/ by ts-proto; this
// file is the friendly layer.

import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { parse as parseYAML } from "yaml";

import { FileInfo as WireFileInfo, FileServiceClient, ListDirResponse } from "./gen/corral/v1/files.js";
import {
  CreateSandboxResponse,
  DeleteSandboxResponse,
  ExposedPort,
  Sandbox as SandboxRecord,
  SandboxServiceClient,
  SandboxSpec,
} from "./gen/corral/v1/sandbox.js";
import { ForkSandboxResponse, Snapshot, SnapshotServiceClient } from "./gen/corral/v1/snapshots.js";
import { TenantServiceClient } from "./gen/corral/v1/tenants.js";

export type { Snapshot };

/** An error the gateway answered with (or the failure to reach it), with its one-line reason. */
export class CorralError extends Error {
  constructor(readonly reason: string, readonly code?: grpc.status) {
    super(reason);
    this.name = new.target.name;
  }
}
/** No such sandbox, file or pool. */
export class NotFoundError extends CorralError {}
/** A sandbox or pool of that name exists. */
export class AlreadyExistsError extends CorralError {}
/** The request is malformed: a bad name, command, path or policy. */
export class InvalidArgumentError extends CorralError {}
/** The sandbox is not in a state for it (not ready, being deleted, ...). */
export class FailedPreconditionError extends CorralError {}
/** The caller may not do it. */
export class PermissionDeniedError extends CorralError {}
/** No valid client certificate or token came with the call (a token unknown, revoked or expired). */
export class UnauthenticatedError extends PermissionDeniedError {}
/** A bound was reached. */
export class ResourceExhaustedError extends CorralError {}
/** The gateway cannot be reached, or is shutting down. */
export class UnavailableError extends CorralError {}
/** The call ran past the time it was given. */
export class TimeoutError extends CorralError {}

const classes: Partial<Record<grpc.status, new (reason: string, code?: grpc.status) => CorralError>> = {
  [grpc.status.NOT_FOUND]: NotFoundError,
  [grpc.status.ALREADY_EXISTS]: AlreadyExistsError,
  [grpc.status.INVALID_ARGUMENT]: InvalidArgumentError,
  [grpc.status.FAILED_PRECONDITION]: FailedPreconditionError,
  [grpc.status.PERMISSION_DENIED]: PermissionDeniedError,
  [grpc.status.UNAUTHENTICATED]: UnauthenticatedError,
  [grpc.status.RESOURCE_EXHAUSTED]: ResourceExhaustedError,
  [grpc.status.UNAVAILABLE]: UnavailableError,
  [grpc.status.DEADLINE_EXCEEDED]: TimeoutError,
};

function typed(err: unknown, address: string): CorralError {
  const e = err as grpc.ServiceError;
  if (e && typeof e.code === "number") {
    let reason = e.details || e.message;
    if (e.code === grpc.status.UNAVAILABLE && /connect|No connection/i.test(reason)) {
      reason = `cannot reach the gateway at ${address}: is \`corral gateway\` running? (${reason})`;
    }
    const Class = classes[e.code] ?? CorralError;
    return new Class(reason, e.code);
  }
  return err instanceof CorralError ? err : new CorralError(String(err));
}

/** How to reach a gateway; with none of these, the gateway the corral command line reaches. */
export interface GatewayOptions {
  /** unix:///path/corral.sock, or https://HOST:PORT with ca and either cert and key or a token. */
  address?: string;
  /** A context of the command line's configuration (corral context add). */
  context?: string;
  /** A gateway's home directory on this machine: its socket. */
  home?: string;
  /** PEM files: the gateway's CA certificate, the client's certificate and key (from corral gateway client-cert). */
  ca?: string;
  cert?: string;
  key?: string;
  /** A bearer token (corral token create) to call as, sent on every call; unset, $CORRAL_TOKEN, else the context's. */
  token?: string;
  /** The tenant to act in, for an admin (others may name only their own); unset, $CORRAL_TENANT, else the context's. */
  tenant?: string;
}

/** The environment variables a Gateway reads when its token or tenant is not given. */
export const TOKEN_ENV = "CORRAL_TOKEN";
export const TENANT_ENV = "CORRAL_TENANT";

/** The metadata a call carries to act as token in tenant: "authorization: Bearer TOKEN" and "corral-tenant: TENANT". */
export function callMetadata(token?: string, tenant?: string): { [key: string]: string } {
  const md: { [key: string]: string } = {};
  if (token) md["authorization"] = "Bearer " + token;
  if (tenant) md["corral-tenant"] = tenant;
  return md;
}

/** An interceptor that puts the entries of md on every call, beside the metadata the call was given. */
function callAs(md: { [key: string]: string }): grpc.Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        for (const [k, v] of Object.entries(md)) metadata.set(k, v);
        next(metadata, listener);
      },
    });
}

/** CORRAL_HOME, else /var/lib/corral as root, else $XDG_DATA_HOME/corral. */
export function defaultHome(): string {
  if (process.env.CORRAL_HOME) return process.env.CORRAL_HOME;
  if (process.getuid?.() === 0) return "/var/lib/corral";
  return join(process.env.XDG_DATA_HOME || join(homedir(), ".local", "share"), "corral");
}

/** Where the command line keeps its contexts: $CORRAL_CONFIG, else $XDG_CONFIG_HOME/corral/config. */
export function configPath(): string {
  if (process.env.CORRAL_CONFIG) return process.env.CORRAL_CONFIG;
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), ".config"), "corral", "config");
}

interface ContextEntry {
  gateway: string;
  ca?: string;
  cert?: string;
  key?: string;
  token?: string;
  tenant?: string;
}

/** The named context (or the current one; undefined when there is none). */
function readContext(name?: string): ContextEntry | undefined {
  let cfg: { "current-context"?: string; contexts?: { [name: string]: ContextEntry } } = {};
  try {
    cfg = parseYAML(readFileSync(configPath(), "utf8")) ?? {};
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  name ||= cfg["current-context"];
  if (!name) return undefined;
  const entry = cfg.contexts?.[name];
  if (!entry) throw new Error(`context ${JSON.stringify(name)} not found (see corral context list)`);
  return entry;
}

/** Where opts reach, as the command line finds it: address, then context, then home or CORRAL_HOME, then the current context, then the default home. The token and the tenant are the options', else the environment's, else the context's. */
function resolve(opts: GatewayOptions): GatewayOptions {
  const target = where(opts);
  return {
    ...target,
    token: opts.token || process.env[TOKEN_ENV] || target.token || undefined,
    tenant: opts.tenant || process.env[TENANT_ENV] || target.tenant || undefined,
  };
}

function where(opts: GatewayOptions): GatewayOptions {
  if (opts.address) return { address: opts.address, ca: opts.ca, cert: opts.cert, key: opts.key };
  if (!opts.context && (opts.home || process.env.CORRAL_HOME)) return { address: "unix://" + join(opts.home ?? defaultHome(), "corral.sock") };
  const entry = readContext(opts.context);
  if (!entry) return { address: "unix://" + join(defaultHome(), "corral.sock") };
  return { address: entry.gateway, ca: entry.ca, cert: entry.cert, key: entry.key, token: entry.token, tenant: entry.tenant };
}

/** A connection to a gateway. */
export class Gateway {
  readonly address: string;
  readonly sandboxes: SandboxServiceClient;
  readonly files: FileServiceClient;
  /** The tenant API: tenants, quotas and bearer tokens. */
  readonly tenants: TenantServiceClient;
  /** The snapshot API: snapshots, forks, export and import. */
  readonly snapshots: SnapshotServiceClient;
  /** The tenant the gateway's calls name (the token's own when unset). */
  readonly tenant?: string;

  constructor(given: GatewayOptions = {}) {
    const opts = resolve(given);
    const address = opts.address!;
    this.address = address;
    let target: string;
    let creds: grpc.ChannelCredentials;
    if (address.startsWith("unix://")) {
      target = address;
      creds = grpc.credentials.createInsecure();
    } else if (address.startsWith("https://")) {
      const u = new URL(address);
      if (!u.port) throw new Error(`gateway ${address}: want https://HOST:PORT`);
      if (!opts.ca || (!opts.cert && !opts.key && !opts.token)) {
        throw new Error(
          `gateway ${address}: an https gateway needs ca, cert and key (see corral gateway client-cert), ` +
            `or ca and a bearer token (token or $${TOKEN_ENV}; see corral token create)`,
        );
      }
      if (!opts.cert !== !opts.key) {
        throw new Error(`gateway ${address}: a client certificate needs its key, and a key its certificate (cert and key)`);
      }
      target = `${u.hostname}:${u.port}`;
      creds = grpc.credentials.createSsl(
        readFileSync(opts.ca),
        opts.key ? readFileSync(opts.key) : null,
        opts.cert ? readFileSync(opts.cert) : null,
      );
    } else {
      throw new Error(`gateway ${address}: want unix:///path/corral.sock or https://HOST:PORT`);
    }
    this.tenant = opts.tenant;
    const md = callMetadata(opts.token, opts.tenant);
    const options: Partial<grpc.ClientOptions> = { "grpc.max_receive_message_length": 8 << 20 };
    if (Object.keys(md).length) options.interceptors = [callAs(md)];
    this.sandboxes = new SandboxServiceClient(target, creds, options);
    this.files = new FileServiceClient(target, creds, options);
    this.tenants = new TenantServiceClient(target, creds, options);
    this.snapshots = new SnapshotServiceClient(target, creds, options);
  }

  close(): void {
    this.sandboxes.close();
    this.files.close();
    this.tenants.close();
    this.snapshots.close();
  }
}

/** What a command printed, and how it ended. */
export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** How a command runs. */
export interface ExecOptions {
  /** Input for the command; its end closes the command's stdin. */
  stdin?: string | Uint8Array;
  /** Seconds; past them the call fails with TimeoutError. */
  timeout?: number;
  env?: { [name: string]: string };
  cwd?: string;
}

/** What a sandbox is created from. */
export interface CreateOptions {
  name: string;
  image?: string;
  /** The main command; without one the sandbox keeps running, ready for exec. */
  command?: string[];
  /** The sandbox's policy, as YAML text. */
  policy?: string;
  labels?: { [key: string]: string };
  /** Claim a ready sandbox of this warm pool (then image, command and policy are the pool's). */
  pool?: string;
  /** Make it from this snapshot: its files, and its image, command, labels and policy unless given. */
  fromSnapshot?: string;
  /** Wait until it runs (default true). */
  wait?: boolean;
  gateway?: Gateway;
}

/** A file of a sandbox. */
export interface FileInfo {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: number;
}

function info(i: WireFileInfo): FileInfo {
  return { name: i.name, path: i.path, type: i.type, size: i.size, mode: i.mode };
}

function absolute(path: string): string {
  return path.startsWith("/") ? path : "/sandbox/" + path;
}

/** Calls a unary RPC (call gives it its callback), as a promise of its typed answer. */
function unary<Res>(gw: Gateway, call: (cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown): Promise<Res> {
  return new Promise((resolve, reject) => {
    call((err, res) => (err ? reject(typed(err, gw.address)) : resolve(res)));
  });
}

const chunk = 256 << 10;

/** A sandbox of a corral gateway; `await using sb = await Sandbox.create(...)` deletes it at the block's end. */
export class Sandbox {
  readonly files: Files;
  readonly ports: Ports;

  private constructor(readonly gateway: Gateway, private record: SandboxRecord, private readonly ownsGateway: boolean) {
    this.files = new Files(this);
    this.ports = new Ports(this);
  }

  get name(): string {
    return this.record.name;
  }
  get id(): string {
    return this.record.id;
  }
  get phase(): string {
    return this.record.phase;
  }

  /** Creates a sandbox and, unless wait is false, waits until it runs. */
  static async create(opts: CreateOptions): Promise<Sandbox> {
    const owns = !opts.gateway;
    const gw = opts.gateway ?? new Gateway();
    try {
      const command = opts.command ?? (opts.fromSnapshot ? [] : ["sleep", "infinity"]);
      const spec: SandboxSpec = opts.pool
        ? SandboxSpec.fromPartial({ labels: opts.labels ?? {} })
        : SandboxSpec.fromPartial({ image: opts.image ?? "", command, policy: opts.policy ?? "", labels: opts.labels ?? {} });
      const resp = await unary<CreateSandboxResponse>(gw, (cb) =>
        gw.sandboxes.createSandbox({ name: opts.name, spec, requestId: "", pool: opts.pool ?? "", fromSnapshot: opts.fromSnapshot ?? "" }, cb));
      const sb = new Sandbox(gw, resp.sandbox!, owns);
      if (opts.wait !== false) await sb.wait("running", resp.sandbox!.revision);
      return sb;
    } catch (e) {
      if (owns) gw.close();
      throw e;
    }
  }

  /** The sandbox that exists by that name (or id). */
  static async connect(name: string, gateway?: Gateway): Promise<Sandbox> {
    const gw = gateway ?? new Gateway();
    try {
      return new Sandbox(gw, await unary<SandboxRecord>(gw, (cb) => gw.sandboxes.getSandbox({ name }, cb)), !gateway);
    } catch (e) {
      if (!gateway) gw.close();
      throw e;
    }
  }

  /** Reads the record again. */
  async refresh(): Promise<this> {
    this.record = await unary<SandboxRecord>(this.gateway, (cb) => this.gateway.sandboxes.getSandbox({ name: this.id }, cb));
    return this;
  }

  /** Waits until the sandbox reaches goal ("running", "stopped", "paused" or "deleted") after the request that returned revision since. */
  wait(goal: "running" | "stopped" | "paused" | "deleted", since = 0): Promise<this> {
    return new Promise((resolve, reject) => {
      const stream = this.gateway.sandboxes.waitSandbox({ name: this.id, goal, sinceRevision: since });
      let done = false;
      stream.on("data", (ev) => {
        if (ev.type === "REACHED") {
          done = true;
          if (ev.sandbox) this.record = ev.sandbox;
          resolve(this);
        }
      });
      stream.on("error", (err) => reject(typed(err, this.gateway.address)));
      stream.on("end", () => {
        if (!done) reject(new UnavailableError("the gateway ended the wait without an answer"));
      });
    });
  }

  /** Runs cmd (an argv, or a string for sh -c) in the running sandbox; 127: no such program. */
  async exec(cmd: string | string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let exitCode = -1;
    for await (const part of this.execStream(cmd, opts)) {
      if (part.stream === "exit") exitCode = part.exitCode;
      else if (part.stream === "stdout") out.push(part.data);
      else err.push(part.data);
    }
    return { stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8"), exitCode };
  }

  /** Runs cmd as exec does, yielding its output as it comes, then its exit code. */
  async *execStream(cmd: string | string[], opts: ExecOptions = {}): AsyncGenerator<
    { stream: "stdout" | "stderr"; data: Buffer } | { stream: "exit"; exitCode: number }
  > {
    let argv = typeof cmd === "string" ? ["sh", "-c", cmd] : [...cmd];
    if (opts.env) argv = ["env", ...Object.entries(opts.env).map(([k, v]) => `${k}=${v}`), ...argv];
    if (opts.cwd) argv = ["sh", "-c", 'cd "$0" && exec "$@"', opts.cwd, ...argv];
    const due = opts.timeout ? Date.now() + opts.timeout * 1000 : Infinity;
    const call = this.gateway.sandboxes.execSandbox(opts.timeout ? { deadline: due } : {});
    call.write({ start: { name: this.id, command: argv, tty: false, stdin: opts.stdin !== undefined, size: undefined } });
    if (opts.stdin !== undefined) {
      const data = typeof opts.stdin === "string" ? Buffer.from(opts.stdin) : Buffer.from(opts.stdin);
      for (let i = 0; i < data.length; i += chunk) call.write({ stdin: data.subarray(i, i + chunk) });
      call.write({ closeStdin: true });
    }
    try {
      for await (const resp of call) {
        if (resp.stdout) yield { stream: "stdout", data: resp.stdout };
        else if (resp.stderr) yield { stream: "stderr", data: resp.stderr };
        else if (resp.exitCode !== undefined) {
          yield { stream: "exit", exitCode: resp.exitCode };
          return;
        }
      }
    } catch (e) {
      if (Date.now() >= due) {
        // grpc-js may end a call past its deadline as cancelled rather than as past it
        throw new TimeoutError(`the command ran past its timeout of ${opts.timeout} s`, grpc.status.DEADLINE_EXCEEDED);
      }
      throw typed(e, this.gateway.address);
    } finally {
      call.cancel();
    }
    throw new UnavailableError("the gateway ended the exec without an exit code");
  }

  /** What the sandbox's main process printed. */
  logs(tail = 0): Promise<string> {
    return new Promise((resolve, reject) => {
      const parts: Buffer[] = [];
      const stream = this.gateway.sandboxes.sandboxLogs({ name: this.id, follow: false, tail });
      stream.on("data", (c) => parts.push(Buffer.concat([c.stdout, c.stderr])));
      stream.on("error", (err) => reject(typed(err, this.gateway.address)));
      stream.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    });
  }

  /** Stops the sandbox (its /sandbox stays) and waits until it is stopped. */
  async stop(): Promise<this> {
    this.record = await unary<SandboxRecord>(this.gateway, (cb) => this.gateway.sandboxes.stopSandbox({ name: this.id }, cb));
    return this.wait("stopped", this.record.revision);
  }

  /** Starts the stopped sandbox and waits until it runs. */
  async start(): Promise<this> {
    this.record = await unary<SandboxRecord>(this.gateway, (cb) => this.gateway.sandboxes.startSandbox({ name: this.id }, cb));
    return this.wait("running", this.record.revision);
  }

  /**
   * Freezes every process of the sandbox, memory kept, and waits until it is paused. With
   * `{ memory: true }` its processes and memory are checkpointed out to the gateway's disk and
   * the memory freed instead (native's gVisor tier, with `lifecycle.memory_snapshots`).
   */
  async pause(opts: { memory?: boolean } = {}): Promise<this> {
    const req = { name: this.id, memory: opts.memory ?? false };
    this.record = await unary<SandboxRecord>(this.gateway, (cb) => this.gateway.sandboxes.pauseSandbox(req, cb));
    return this.wait("paused", this.record.revision);
  }

  /** Thaws the paused sandbox (the same processes go on) and waits until it runs. */
  async resume(): Promise<this> {
    this.record = await unary<SandboxRecord>(this.gateway, (cb) => this.gateway.sandboxes.resumeSandbox({ name: this.id }, cb));
    return this.wait("running", this.record.revision);
  }

  /** Takes a snapshot of the sandbox's /sandbox (paused for the instant of the copy); create from it with fromSnapshot. */
  snapshot(name: string): Promise<Snapshot> {
    return unary<Snapshot>(this.gateway, (cb) => this.gateway.snapshots.createSnapshot({ sandbox: this.id, name, memory: false }, cb));
  }

  /** Makes count sandboxes from a snapshot of this one, at once, each with its own /sandbox, and waits until they run. */
  async fork(count: number, opts: { namePrefix?: string; labels?: { [key: string]: string } } = {}): Promise<Sandbox[]> {
    const resp = await unary<ForkSandboxResponse>(this.gateway, (cb) =>
      this.gateway.snapshots.forkSandbox({ sandbox: this.id, count, namePrefix: opts.namePrefix ?? "", labels: opts.labels ?? {} }, cb));
    const forks = resp.sandboxes.map((r) => new Sandbox(this.gateway, r, false));
    for (const f of forks) await f.wait("running", f.record.revision);
    return forks;
  }

  /** Deletes the sandbox, in any phase, and waits until it is gone. */
  async delete(opts: { force?: boolean } = {}): Promise<void> {
    try {
      const resp = await unary<DeleteSandboxResponse>(this.gateway, (cb) =>
        this.gateway.sandboxes.deleteSandbox({ name: this.id, force: opts.force ?? false, assumeGone: false, reason: "" }, cb));
      await this.wait("deleted", resp.sandbox!.revision);
    } finally {
      if (this.ownsGateway) this.gateway.close();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete({ force: true });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }
}

/** A sandbox's files; a relative path is under /sandbox. */
export class Files {
  constructor(private readonly sb: Sandbox) {}

  private get gw(): Gateway {
    return this.sb.gateway;
  }

  /** The file's content. */
  read(path: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const parts: Buffer[] = [];
      const stream = this.gw.files.readFile({ sandbox: this.sb.id, path: absolute(path) });
      stream.on("data", (c) => parts.push(c.data));
      stream.on("error", (err) => reject(typed(err, this.gw.address)));
      stream.on("end", () => resolve(Buffer.concat(parts)));
    });
  }

  /** Writes the file whole (made, or replaced atomically). */
  write(path: string, data: string | Uint8Array, mode = 0): Promise<FileInfo> {
    return new Promise((resolve, reject) => {
      const call = this.gw.files.writeFile((err, res) => (err ? reject(typed(err, this.gw.address)) : resolve(info(res))));
      call.write({ header: { sandbox: this.sb.id, path: absolute(path), mode } });
      const buf = typeof data === "string" ? Buffer.from(data) : Buffer.from(data);
      for (let i = 0; i < buf.length; i += chunk) call.write({ data: buf.subarray(i, i + chunk) });
      call.end();
    });
  }

  async list(path = "/sandbox"): Promise<FileInfo[]> {
    const resp = await unary<ListDirResponse>(this.gw, (cb) => this.gw.files.listDir({ sandbox: this.sb.id, path: absolute(path) }, cb));
    return resp.entries.map(info);
  }

  async stat(path: string): Promise<FileInfo> {
    return info(await unary<WireFileInfo>(this.gw, (cb) => this.gw.files.statFile({ sandbox: this.sb.id, path: absolute(path) }, cb)));
  }

  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await unary<unknown>(this.gw, (cb) =>
      this.gw.files.removeFile({ sandbox: this.sb.id, path: absolute(path), recursive: opts.recursive ?? false }, cb));
  }

  async mkdir(path: string, opts: { parents?: boolean } = {}): Promise<FileInfo> {
    return info(await unary<WireFileInfo>(this.gw, (cb) =>
      this.gw.files.makeDir({ sandbox: this.sb.id, path: absolute(path), parents: opts.parents ?? false, mode: 0 }, cb)));
  }

  /** Yields each change in a directory of the running sandbox ("ready" first), until the loop ends. */
  async *watch(path = "/sandbox"): AsyncGenerator<{ type: string; path: string }> {
    const stream = this.gw.files.watchDir({ sandbox: this.sb.id, path: absolute(path) });
    try {
      for await (const ev of stream) yield { type: ev.type, path: ev.path };
    } catch (e) {
      if ((e as grpc.ServiceError).code !== grpc.status.CANCELLED) throw typed(e, this.gw.address);
    } finally {
      stream.cancel();
    }
  }
}

/** A sandbox's ports. */
export class Ports {
  constructor(private readonly sb: Sandbox) {}

  /** Serves the sandbox's loopback port on the gateway's host; returns the address. */
  async expose(port: number, address = ""): Promise<string> {
    const gw = this.sb.gateway;
    return (await unary<ExposedPort>(gw, (cb) => gw.sandboxes.exposePort({ name: this.sb.id, port, address }, cb))).address;
  }

  /** Sends data to the sandbox's loopback port, ends its side, and returns everything the server answered. */
  forward(port: number, data: string | Uint8Array): Promise<Buffer> {
    const gw = this.sb.gateway;
    return new Promise((resolve, reject) => {
      const parts: Buffer[] = [];
      const call = gw.sandboxes.portForward();
      call.on("data", (f) => {
        parts.push(f.data);
        if (f.closeWrite) {
          call.cancel();
          resolve(Buffer.concat(parts));
        }
      });
      call.on("error", (err) => {
        if ((err as grpc.ServiceError).code !== grpc.status.CANCELLED) reject(typed(err, gw.address));
      });
      call.on("end", () => resolve(Buffer.concat(parts)));
      call.write({ name: this.sb.id, port, data: Buffer.alloc(0), closeWrite: false });
      const buf = typeof data === "string" ? Buffer.from(data) : Buffer.from(data);
      for (let i = 0; i < buf.length; i += chunk) call.write({ name: "", port: 0, data: buf.subarray(i, i + chunk), closeWrite: false });
      call.end();
    });
  }
}
