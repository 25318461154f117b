// Browser journeys (`.ci/console` runs them): Debian's Chromium driven by Playwright against a
// real api on a fresh database, started by that script, which passes its address and the
// other parts in the environment (see e2e/env.ts). Playwright's own browser download is
// unreachable here, so the system browser is launched.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "e2e",
  outputDir: process.env.CONSOLE_E2E_OUTPUT ?? "test-results",
  timeout: 120_000,
  expect: { timeout: 15_000 },
  workers: 1,
  fullyParallel: false,
  retries: 0,
  reporter: [["list"]],
  use: {
    baseURL: process.env.CONSOLE_BASE_URL,
    viewport: { width: 1280, height: 900 },
    // Dates as the journeys read them (24-hour clock); the window preview names its own zone.
    locale: "en-GB",
    timezoneId: "UTC",
    screenshot: "only-on-failure",
    trace: "retain-on-failure",
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
});
