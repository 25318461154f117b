// The console's two figures (BENCHMARKS.md "The web console"), in Debian's Chromium driven by
// Playwright, against an api that `.ci/bench-console` started and filled:
// 1. first load: the bytes the browser fetched over the wire for `/sign-in` in a fresh
//    context (script, style, document), compressed as served, beside their decoded size;
// 2. the host list: from navigation to the moment 50 rows are shown, for an organization of
//    BIG_HOSTS hosts and one of SMALL_HOSTS hosts, signed in, ROUNDS rounds each, alternating.
// Prints a table and one `RESULT {json}` line.
import { chromium } from "@playwright/test";

const base = process.env.CONSOLE_BASE_URL;
const rounds = Number(process.env.ROUNDS ?? 15);
const orgs = [
  { slug: process.env.BIG_ORG ?? "big", cookie: process.env.BIG_COOKIE, hosts: Number(process.env.BIG_HOSTS ?? 10000) },
  { slug: process.env.SMALL_ORG ?? "small", cookie: process.env.SMALL_COOKIE, hosts: Number(process.env.SMALL_HOSTS ?? 100) },
];
if (!base || orgs.some((o) => !o.cookie)) {
  console.error("run through .ci/bench-console (CONSOLE_BASE_URL, BIG_COOKIE, SMALL_COOKIE)");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

async function firstLoad() {
  const context = await browser.newContext();
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  const types = new Map();
  const decoded = new Map();
  const encoded = new Map();
  cdp.on("Network.responseReceived", (e) => types.set(e.requestId, e.type));
  cdp.on("Network.dataReceived", (e) => decoded.set(e.requestId, (decoded.get(e.requestId) ?? 0) + e.dataLength));
  cdp.on("Network.loadingFinished", (e) => encoded.set(e.requestId, e.encodedDataLength));
  await page.goto(`${base}/sign-in`, { waitUntil: "networkidle" });
  await page.getByRole("button", { name: "Email me a sign-in link" }).waitFor();
  const sum = {};
  for (const [id, type] of types) {
    const entry = (sum[type] ??= { transferred: 0, decoded: 0, files: 0 });
    entry.transferred += encoded.get(id) ?? 0;
    entry.decoded += decoded.get(id) ?? 0;
    entry.files += 1;
  }
  await context.close();
  return sum;
}

async function showFifty(org, warm) {
  const context = await browser.newContext();
  const [name, value] = org.cookie.split("=");
  await context.addCookies([{ name, value, url: base }]);
  const page = await context.newPage();
  if (warm) {
    // The script and the session answer already in the browser's cache, as on a second visit.
    await page.goto(`${base}/orgs/${org.slug}/proposals`, { waitUntil: "networkidle" });
  }
  await page.goto(`${base}/orgs/${org.slug}/hosts`);
  await page.waitForFunction(() => document.querySelectorAll("table.hosts tbody tr").length >= 50, null, {
    polling: "raf",
    timeout: 30_000,
  });
  const ms = await page.evaluate(() => performance.now());
  const count = await page.locator(".count").textContent();
  await context.close();
  return { ms, count };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(xs.length * 0.9) - 1)];

const load = await firstLoad();
console.log("first load of /sign-in (fresh browser context):");
for (const [type, v] of Object.entries(load)) {
  console.log(`  ${type.padEnd(10)} ${v.files} file(s): ${v.transferred} bytes transferred, ${v.decoded} bytes decoded`);
}

const times = {};
for (const warm of [false, true]) {
  for (const org of orgs) times[`${org.slug}:${warm ? "warm" : "cold"}`] = [];
  // One unmeasured round each, then alternate the organizations round by round.
  for (const org of orgs) await showFifty(org, warm);
  for (let i = 0; i < rounds; i++) {
    for (const org of orgs) {
      const { ms, count } = await showFifty(org, warm);
      times[`${org.slug}:${warm ? "warm" : "cold"}`].push(ms);
      if (i === 0) console.log(`  ${org.slug}: the page says ${count}`);
    }
  }
}
console.log(`time from navigation to 50 host rows shown, ${rounds} rounds:`);
const summary = {};
for (const [key, xs] of Object.entries(times)) {
  summary[key] = { median_ms: Math.round(median(xs)), p90_ms: Math.round(p90(xs)), min_ms: Math.round(Math.min(...xs)) };
  console.log(`  ${key.padEnd(12)} median ${summary[key].median_ms} ms, p90 ${summary[key].p90_ms} ms, min ${summary[key].min_ms} ms`);
}
for (const warm of ["cold", "warm"]) {
  const ratio = summary[`${orgs[0].slug}:${warm}`].median_ms / summary[`${orgs[1].slug}:${warm}`].median_ms;
  summary[`ratio_${warm}`] = Number(ratio.toFixed(2));
  console.log(`  ratio ${orgs[0].hosts} hosts / ${orgs[1].hosts} hosts (${warm}): ${ratio.toFixed(2)}`);
}
console.log(`RESULT ${JSON.stringify({ first_load: load, host_list: summary })}`);
await browser.close();
