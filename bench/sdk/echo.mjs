// Times `echo hi` run N times in sandbox NAME through the TypeScript SDK,
// printing each round trip in nanoseconds (bench -driver interfaces).
// CORRAL_SDK names the built SDK (sdk/typescript/dist/index.js).
const { Sandbox } = await import(process.env.CORRAL_SDK);
const [name, n] = process.argv.slice(2);
const sb = await Sandbox.connect(name);
for (let i = 0; i < Number(n); i++) {
  const t0 = process.hrtime.bigint();
  const r = await sb.exec(["echo", "hi"]);
  const took = process.hrtime.bigint() - t0;
  if (r.stdout !== "hi\n" || r.exitCode !== 0) throw new Error(`exec returned ${JSON.stringify(r)}`);
  console.log(String(took));
}
sb.gateway.close();
