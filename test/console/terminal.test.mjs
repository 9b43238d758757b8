// The console's terminal in Debian's Chromium: an exec with a TTY over a
// WebSocket into a sandbox of a native gateway (CORRAL_CONSOLE_URL,
// CORRAL_TOKEN; the sandbox CORRAL_SANDBOX runs already): what is typed
// runs, what it prints is on the screen, and a resize reaches the TTY.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const url = process.env.CORRAL_CONSOLE_URL;
const shots = process.env.CORRAL_SHOTS;

const rows = (page) => page.evaluate(() => [...document.querySelectorAll("#terminal .xterm-rows > div")].map((d) => d.textContent.trim()));

async function waitForRow(page, want) {
  for (let i = 0; i < 100; i++) {
    if ((await rows(page)).some((r) => want.test(r))) return;
    await page.waitForTimeout(100);
  }
  assert.fail(`no row of the terminal matches ${want}: ${JSON.stringify(await rows(page))}`);
}

test("echo hi in the terminal shows hi; a resize reaches the TTY", async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(url + "/login");
    await page.fill("#token", process.env.CORRAL_TOKEN);
    await page.click("button[type=submit]");
    await page.goto(url + "/#/sandbox/" + process.env.CORRAL_SANDBOX);
    await page.waitForSelector("#sb-facts dd:has-text('ready')");
    await page.click("#term-open");
    await page.waitForSelector("#terminal .xterm-rows");
    await page.waitForTimeout(500); // the shell's prompt
    await page.keyboard.type("echo hi\n");
    await waitForRow(page, /^hi$/);
    if (shots) await page.screenshot({ path: shots + "/terminal.png" });

    await page.setViewportSize({ width: 800, height: 900 });
    const cols = await page.evaluate(() => new Promise((r) => setTimeout(() => r(document.querySelector("#terminal .xterm-rows > div").parentElement
      .closest(".xterm").clientWidth), 300)));
    assert.ok(cols > 0);
    await page.keyboard.type("stty size\n");
    await waitForRow(page, /^\d+ \d+$/);
    const size = (await rows(page)).filter((r) => /^\d+ \d+$/.test(r)).pop().split(" ").map(Number);
    assert.ok(size[1] < 120, `the TTY kept ${size[1]} columns after the page narrowed`);
    await page.keyboard.type("exit 3\n");
    await waitForRow(page, /\[exited 3\]/);
  } finally {
    await browser.close();
  }
});
