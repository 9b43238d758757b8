// The web console in Debian's Chromium, headless, against a gateway the Go
// test started (CORRAL_CONSOLE_URL) with tokens it made: a member's
// (CORRAL_TOKEN) and a viewer's (CORRAL_VIEWER_TOKEN). CORRAL_BIN and
// CORRAL_HOME drive the same gateway from its CLI; CORRAL_SHOTS is where
// the screenshots go.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chromium } from "playwright-core";

const url = process.env.CORRAL_CONSOLE_URL;
// the gateway's own CLI, as the local socket's user (not the browser's token)
const corral = (...args) => execFileSync(process.env.CORRAL_BIN, ["--home", process.env.CORRAL_HOME, ...args],
  { encoding: "utf8", env: { ...process.env, CORRAL_TOKEN: "" } });
const shots = process.env.CORRAL_SHOTS;

let loginShot = false;

async function browse(token) {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const dialogs = [];
  page.on("dialog", async (d) => {
    dialogs.push(d.message());
    await (d.type() === "prompt" ? d.accept("snap-from-console") : d.accept());
  });
  await page.goto(url + "/login");
  if (shots && !loginShot) {
    loginShot = true;
    await page.screenshot({ path: shots + "/login.png" });
  }
  await page.fill("#token", token);
  await page.click("button[type=submit]");
  await page.waitForSelector("#live:has-text('live')");
  return { browser, page, dialogs };
}

const row = (page, name) => page.locator(`#sandboxes tr[data-name="${name}"]`);

test("create from the form, ready without reloading, the journal, stop and delete", async () => {
  const { browser, page, dialogs } = await browse(process.env.CORRAL_TOKEN);
  try {
    await page.click("#new");
    await page.fill("#create [name=name]", "from-form");
    await page.fill("#create [name=command]", "sleep 1d");
    await page.fill("#create [name=labels]", "team=web");
    await page.click("#create button[type=submit]");
    await row(page, "from-form").locator("td.phase-ready").waitFor({ timeout: 30000 });
    if (shots) await page.screenshot({ path: shots + "/list.png" });

    await row(page, "from-form").locator("a").click();
    await page.waitForSelector("#sb-history td:has-text('driver.start')");
    assert.match(await page.textContent("#sb-history"), /create[\s\S]*succeeded/);
    if (shots) await page.screenshot({ path: shots + "/sandbox.png" });
    await page.click("button[data-action=snapshot]");
    await page.waitForSelector("#sb-error:has-text('snapshot snap-from-console taken')", { timeout: 30000 });
    assert.match(corral("snapshot", "list"), /snap-from-console/);
    corral("snapshot", "delete", "snap-from-console");
    await page.click("button[data-action=stop]");
    await page.waitForSelector("#sb-facts dd:has-text('stopped')", { timeout: 30000 });
    assert.match(await page.textContent("#sb-history"), /stop/);
    await page.click("button[data-action=delete-force]");
    await page.waitForURL(/#\/$/);
    await row(page, "from-form").waitFor({ state: "detached", timeout: 30000 });
    assert.deepEqual(dialogs, ["Name of the snapshot of from-form:", "Delete from-form at once, without a graceful stop?"]);
    // a member's doctor: the API says it is an admin's
    await page.goto(url + "/#/doctor");
    await page.waitForSelector("#doctor-error:has-text('needs the admin role')");
    await page.goto(url + "/#/pools");
    await page.waitForSelector("#pools-view:not([hidden])");
  } finally {
    await browser.close();
  }
});

test("a bad policy is refused with its line, and nothing is made", async () => {
  const { browser, page } = await browse(process.env.CORRAL_TOKEN);
  try {
    await page.click("#new");
    await page.fill("#create [name=name]", "bad-policy");
    await page.fill("#create [name=policy]", "version: 1\nlimits:\n  pids: lots\n");
    await page.click("#create button[type=submit]");
    await page.waitForSelector("#create-error:not([hidden])");
    assert.match(await page.textContent("#create-error"), /line 3/);
    assert.equal(await row(page, "bad-policy").count(), 0);
  } finally {
    await browser.close();
  }
});

test("what a sandbox and its owner wrote is shown as text", async () => {
  const hostile = `"><img src=x onerror=alert(1)><script>alert(2)</script>`;
  corral("sandbox", "create", "--name", "hostile", "--label", "x=" + hostile, "--", "echo", hostile);
  const { browser, page, dialogs } = await browse(process.env.CORRAL_TOKEN);
  try {
    await row(page, "hostile").waitFor();
    assert.ok((await row(page, "hostile").textContent()).includes(hostile));
    await row(page, "hostile").locator("a").click();
    await page.waitForFunction((h) => document.getElementById("sb-logs").textContent.includes(h), hostile, { timeout: 30000 });
    assert.equal(await page.locator("img").count(), 0);
    assert.equal(await page.locator("main script").count(), 0);
    assert.deepEqual(dialogs, []);
  } finally {
    await browser.close();
  }
  corral("sandbox", "delete", "--force", "hostile");
});

test("a viewer sees the list and the logs, and no action", async () => {
  corral("sandbox", "create", "--name", "watched", "--", "echo", "seen by a viewer");
  const { browser, page } = await browse(process.env.CORRAL_VIEWER_TOKEN);
  try {
    assert.equal(await page.isHidden("#new"), true);
    await row(page, "watched").locator("a").click();
    await page.waitForFunction(() => document.getElementById("sb-logs").textContent.includes("seen by a viewer"), null, { timeout: 30000 });
    assert.equal(await page.locator("#sb-actions button").count(), 0);
    // forced: the API refuses it
    const status = await page.evaluate(async () => {
      const s = await (await fetch("/api/session")).json();
      const r = await fetch("/api/sandboxes/watched/stop", { method: "POST", headers: { "X-CSRF-Token": s.csrf } });
      return [r.status, (await r.json()).error];
    });
    assert.equal(status[0], 403);
    assert.match(status[1], /needs the member role/);
  } finally {
    await browser.close();
  }
  corral("sandbox", "delete", "--force", "watched");
});

test("1,000 sandboxes render in under a second and stay live", async () => {
  const { browser, page } = await browse(process.env.CORRAL_TOKEN);
  try {
    await page.waitForFunction(() => document.querySelectorAll("#sandboxes tbody tr").length >= 1000, null, { timeout: 60000 });
    const took = await page.evaluate(async () => {
      const t0 = performance.now();
      document.getElementById("filter-label").value = "";
      document.getElementById("filter-label").dispatchEvent(new Event("input"));
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      return performance.now() - t0;
    });
    console.log(`# rendered ${await page.locator("#sandboxes tbody tr").count()} rows in ${took.toFixed(1)} ms`);
    assert.ok(took < 1000, `the list of 1,000 took ${took} ms to render`);
    corral("sandbox", "stop", "--detach", "many-0007");
    await row(page, "many-0007").locator("td.phase-stopped").waitFor({ timeout: 30000 });
  } finally {
    await browser.close();
  }
});

test("an admin switches tenant; a member may not", async () => {
  corral("tenant", "create", "acme");
  corral("--tenant", "acme", "sandbox", "create", "--name", "in-acme", "--detach");
  const admin = await browse(process.env.CORRAL_ADMIN_TOKEN);
  try {
    await row(admin.page, "in-acme").waitFor();
    assert.ok((await admin.page.locator("#sandboxes tbody tr").count()) > 1);
    await admin.page.selectOption("#tenant", "acme");
    await admin.page.waitForFunction(() => {
      const rows = document.querySelectorAll("#sandboxes tbody tr");
      return rows.length === 1 && rows[0].dataset.name === "in-acme" && document.getElementById("live").textContent.startsWith("live");
    }, null, { timeout: 30000 });
    assert.match(await admin.page.textContent("#who"), /tenant acme/);
    await admin.page.selectOption("#tenant", "");
    await admin.page.waitForFunction(() => document.querySelectorAll("#sandboxes tbody tr").length > 1, null, { timeout: 30000 });
    // the charts: sandboxes by phase, operations per second, driver calls
    await admin.page.goto(url + "/#/charts");
    await admin.page.waitForSelector("#chart-phases rect");
    await admin.page.waitForSelector("#chart-calls text:has-text('start')");
    await admin.page.waitForSelector("#chart-ops polyline[points*=' ']", { state: "attached", timeout: 10000 }); // two samples or more
    if (shots) await admin.page.screenshot({ path: shots + "/charts.png" });
    await admin.page.goto(url + "/#/doctor");
    await admin.page.waitForSelector("#tiers td:has-text('namespaces')");
    if (shots) await admin.page.screenshot({ path: shots + "/doctor.png" });
    await admin.page.goto(url + "/#/pools");
    await admin.page.waitForSelector("#pools-view:not([hidden])");
    if (shots) await admin.page.screenshot({ path: shots + "/pools.png" });
  } finally {
    await admin.browser.close();
  }
  const member = await browse(process.env.CORRAL_TOKEN);
  try {
    assert.equal(await member.page.isHidden("#tenant"), true);
    const [code, error] = await member.page.evaluate(async () => {
      const s = await (await fetch("/api/session")).json();
      const r = await fetch("/api/tenant", { method: "POST", headers: { "X-CSRF-Token": s.csrf, "Content-Type": "application/json" }, body: JSON.stringify({ tenant: "acme" }) });
      return [r.status, (await r.json()).error];
    });
    assert.equal(code, 403);
    assert.match(error, /acts in tenant default only/);
  } finally {
    await member.browser.close();
  }
  corral("--tenant", "acme", "sandbox", "delete", "--force", "in-acme");
});
