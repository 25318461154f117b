// What `.ci/console` started for the journeys, from the environment, and helpers that read the
// real side effects: the emails the api wrote to its outbox, and fleet-sim enrolling hosts.
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Locator, Page } from "@playwright/test";

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the journeys through .ci/console`);
  return value;
}

export const env = {
  base: () => required("CONSOLE_BASE_URL"),
  outbox: () => required("CONSOLE_OUTBOX"),
  fleetSim: () => required("FLEET_SIM"),
  receiver: () => required("RECEIVER_URL"),
  shots: () => process.env.CONSOLE_SCREENSHOTS ?? "test-results/screenshots",
};

export interface Email {
  file: string;
  to: string;
  subject: string;
  text: string;
}

/** A message as the mailer wrote it, its body decoded (quoted-printable or plain). */
function read(file: string): Email {
  const raw = readFileSync(file, "utf8");
  const [head = "", ...rest] = raw.split(/\r?\n\r?\n/);
  const unfolded = head.replace(/\r?\n[ \t]+/g, " ");
  const header = (name: string) =>
    new RegExp(`^${name}:\\s*(.*)$`, "im").exec(unfolded)?.[1]?.trim() ?? "";
  let body = rest.join("\n\n");
  if (/quoted-printable/i.test(raw)) {
    body = body.replace(/=\r?\n/g, "").replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  }
  return { file, to: header("To"), subject: header("Subject"), text: body };
}

/** Waits for a new email to `address` whose text matches `pattern`, and returns the match. */
export async function waitForEmail(address: string, pattern: RegExp, timeoutMs = 30_000): Promise<RegExpExecArray> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let files: string[] = [];
    try {
      files = readdirSync(env.outbox())
        .filter((f) => f.endsWith(".eml"))
        .map((f) => join(env.outbox(), f))
        .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
    } catch {
      // No outbox yet.
    }
    for (const file of files) {
      const email = read(file);
      if (!email.to.toLowerCase().includes(address.toLowerCase())) continue;
      const match = pattern.exec(email.text);
      if (match && !consumed.has(`${file}:${match[0]}`)) {
        consumed.add(`${file}:${match[0]}`);
        return match;
      }
    }
    if (Date.now() > deadline) throw new Error(`no email to ${address} matching ${pattern} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
const consumed = new Set<string>();

/** The path of the newest unused emailed link to `address` (`/sign-up/verify?token=…`). */
export async function emailedLink(address: string, path: string): Promise<string> {
  const escaped = path.replace(/[/?]/g, (c) => `\\${c}`);
  const match = await waitForEmail(address, new RegExp(`${escaped}\\?token=[A-Za-z0-9_-]+`));
  return match[0];
}

/** Enrols `hosts` simulated hosts with enrolment token `token` (one check-in each). */
export function fleetSim(token: string, hosts: number, seed: number, extra: string[] = []): string {
  return execFileSync(
    env.fleetSim(),
    [
      ...["--url", env.base(), "--token", token, "--hosts", String(hosts), "--interval", "1", "--duration", "0"],
      ...["--concurrency", "4", "--seed", String(seed), ...extra],
    ],
    { encoding: "utf8", timeout: 120_000 },
  );
}

/** A full-page screenshot into the screenshots folder CI prints. */
export async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(env.shots(), `${name}.png`), fullPage: true });
}

/** A screenshot of one part of a page (a panel), into the same folder. */
export async function shotOf(part: Locator, name: string): Promise<void> {
  await part.screenshot({ path: join(env.shots(), `${name}.png`) });
}
