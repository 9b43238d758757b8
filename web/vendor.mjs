// Copies the files the console's pages load from node_modules into
// internal/console/static/vendor, which go build embeds.
import { copyFileSync, mkdirSync } from "node:fs";

const out = new URL("../internal/console/static/vendor/", import.meta.url);
mkdirSync(out, { recursive: true });
for (const [from, to] of [
  ["@xterm/xterm/lib/xterm.js", "xterm.js"],
  ["@xterm/xterm/css/xterm.css", "xterm.css"],
  ["@xterm/addon-fit/lib/addon-fit.js", "addon-fit.js"],
  ["@xterm/xterm/LICENSE", "xterm.LICENSE"],
]) {
  copyFileSync(new URL("node_modules/" + from, import.meta.url), new URL(to, out));
}
