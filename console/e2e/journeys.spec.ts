// The journeys of issue 29, in order, on one organization: each builds on what the previous
// ones made (the owner, the hosts, the members, the policies and their proposals).
import AxeBuilder from "@axe-core/playwright";
import { expect, test, type Browser, type BrowserContext, type Page } from "@playwright/test";
import { emailedLink, env, fleetSim, shot, shotOf, waitForEmail } from "./env";

test.describe.configure({ mode: "serial" });

const OWNER = "olivia@acme.example";
const OPERATOR = "bob@acme.example";
const VIEWER = "vic@acme.example";

let owner: BrowserContext;
let page: Page;
let bob: BrowserContext;
let vic: BrowserContext;
let approvalProposal = "";

/** No critical or serious accessibility violation on the page as it is now. */
async function accessible(p: Page, what: string) {
  const results = await new AxeBuilder({ page: p }).analyze();
  const bad = results.violations.filter((v) => v.impact === "critical" || v.impact === "serious");
  expect(
    bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`),
    `${what}: axe violations`,
  ).toEqual([]);
}

async function signInContext(browser: Browser, link: string): Promise<BrowserContext> {
  const context = await browser.newContext();
  const p = await context.newPage();
  await p.goto(link);
  return context;
}

test.beforeAll(async ({ browser }) => {
  owner = await browser.newContext();
  page = await owner.newPage();
});

test.afterAll(async () => {
  await owner?.close();
  await bob?.close();
  await vic?.close();
});

test("sign up, follow the emailed link, land signed in on the fleet page", async () => {
  await page.goto("/");
  await expect(page).toHaveURL(/\/sign-in\?next=%2F$/);
  await expect(page.getByText("Your session has ended")).toHaveCount(0);
  await page.getByRole("link", { name: "Create an organization" }).click();
  await page.getByLabel("Your email address").fill(OWNER);
  await page.getByLabel("Your name").fill("Olivia Owner");
  await page.getByLabel("Organization name").fill("Acme");
  await expect(page.getByLabel("Address in paths (slug)")).toHaveValue("acme");
  await accessible(page, "sign-up");
  await page.getByRole("button", { name: "Email me a link to start" }).click();
  await expect(page.getByRole("status")).toContainText("Check");

  const link = await emailedLink(OWNER, "/sign-up/verify");
  await page.goto(link);
  await expect(page).toHaveURL(/\/orgs\/acme\/hosts$/);
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
  expect(page.url()).not.toContain("token=");
  await expect(page.getByRole("link", { name: "Olivia Owner" })).toBeVisible();
});

test("enrol hosts with fleet-sim using tokens made in the console", async () => {
  await page.getByRole("link", { name: "Enrolment" }).click();
  // The fourth staging host runs an agent that does not report impacts (unknown).
  for (const [name, labels, hosts, seed, unknownEvery] of [
    ["production", "env=prod, tier=web", 6, 11, "0"],
    ["staging", "env=staging", 4, 12, "4"],
  ] as const) {
    await page.getByText("New enrolment token").click();
    await page.getByLabel("Name", { exact: true }).fill(name);
    await page.getByLabel("Labels").fill(labels);
    await page.getByRole("button", { name: "Create token" }).click();
    const token = await page.getByLabel("Token", { exact: true }).inputValue();
    expect(token).toMatch(/^enr_/);
    await expect(page.locator("pre")).toContainText(`fleet-agent enroll --server ${env.base()} --token ${token}`);
    if (name === "production") await shot(page, "enrolment-token");
    fleetSim(token, hosts, seed, ["--unknown-impact-every", unknownEvery]);
    await page.getByRole("button", { name: "Done" }).click();
  }
  await expect(page.getByRole("row", { name: /production/ })).toContainText("6");
  await accessible(page, "enrolment tokens");

  await page.getByRole("link", { name: "Hosts" }).click();
  await expect(page.locator(".count")).toHaveText("10 hosts");
  await expect(page.locator("table.hosts tbody tr")).toHaveCount(10);
});

test("filter the host list by a label, open a host", async () => {
  await page.getByLabel("Labels").fill("env=prod");
  await expect(page.locator(".count")).toHaveText("6 hosts");
  await expect(page.locator("table.hosts tbody tr")).toHaveCount(6);
  await expect(page).toHaveURL(/selector=env%3Dprod/);
  await expect(page.locator("table.hosts tbody")).not.toContainText("env=staging");
  await shot(page, "hosts-filtered");
  await accessible(page, "hosts");

  await page.locator("table.hosts tbody tr a").first().click();
  await expect(page.getByRole("tab", { name: /Updates/ })).toBeVisible();
  await expect(page.getByRole("tabpanel").locator("tbody tr").first()).toBeVisible();
  await page.getByRole("tab", { name: "Packages" }).click();
  await expect(page.getByRole("tabpanel").locator("tbody tr").first()).toBeVisible();
  await shot(page, "host-detail");
  await accessible(page, "host detail");
});

test("invite an operator and a viewer, who accept from their emails", async ({ browser }) => {
  await page.getByRole("link", { name: "Members" }).click();
  for (const [email, role] of [
    [OPERATOR, "operator"],
    [VIEWER, "viewer"],
  ] as const) {
    await page.getByLabel("Email address").fill(email);
    await page.getByLabel("Role", { exact: true }).selectOption(role);
    await page.getByRole("button", { name: "Send invitation" }).click();
    await expect(page.getByText(`${email} as ${role}`)).toBeVisible();
  }
  await accessible(page, "members");
  for (const [email, set] of [
    [OPERATOR, (c: BrowserContext) => (bob = c)],
    [VIEWER, (c: BrowserContext) => (vic = c)],
  ] as const) {
    const link = await emailedLink(email, "/invitations/accept");
    const context = await signInContext(browser, link);
    set(context);
    const p = context.pages()[0]!;
    await p.getByRole("button", { name: "Accept the invitation" }).click();
    await expect(p).toHaveURL(/\/orgs\/acme\/hosts$/);
  }
});

test("create a policy and see its next windows", async () => {
  await page.getByRole("link", { name: "Policies" }).click();
  await page.getByRole("link", { name: "New policy" }).click();
  await page.getByLabel("Name", { exact: true }).fill("Two approvals");
  await page.getByLabel("Approvals needed").fill("2");
  await page.getByLabel("This policy has a maintenance window").check();
  await page.getByLabel("Recurrence (RFC 5545 RRULE)").fill("FREQ=DAILY;BYHOUR=2;BYMINUTE=0");
  await page.getByLabel("Time zone").fill("Europe/Berlin");
  await expect(page.getByTestId("scope-count")).toHaveText("Covers 10 hosts now.");
  const openings = page.locator('ol[aria-label="Next openings (Europe/Berlin)"] li');
  await expect(openings).toHaveCount(5);
  await expect(openings.first()).toContainText("02:00");
  await page.getByLabel("Label selector (optional)").fill("env=prod");
  await expect(page.getByTestId("scope-count")).toHaveText("Covers 6 hosts now.");
  await page.getByLabel("Label selector (optional)").fill("");
  await expect(page.getByTestId("scope-count")).toHaveText("Covers 10 hosts now.");
  await accessible(page, "policy form");
  await page.getByRole("button", { name: "Create policy" }).click();
  await expect(page.getByRole("heading", { name: "Saved window" })).toBeVisible();
  await expect(page.locator("section.panel ol.openings").last().locator("li")).toHaveCount(5);
  await shot(page, "policy");

  await page.getByRole("link", { name: "Policies" }).first().click();
  await page.getByRole("link", { name: "New policy" }).click();
  await page.getByLabel("Name", { exact: true }).fill("One approval");
  await page.getByLabel("Approvals needed").fill("1");
  await page.getByRole("button", { name: "Create policy" }).click();
  await expect(page.getByRole("heading", { name: "One approval" })).toBeVisible();
});

async function proposalOf(policy: string, status = "open"): Promise<string> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    await page.goto(`/orgs/acme/proposals?status=${status}`);
    const row = page.getByRole("row").filter({ hasText: policy }).first();
    if ((await row.count()) > 0) {
      const href = await row.getByRole("link").first().getAttribute("href");
      if (href) return href;
    }
    if (Date.now() > deadline) throw new Error(`no ${status} proposal of ${policy}`);
    await page.waitForTimeout(1000);
  }
}

test("open a proposal and comment with a mention: the member gets the email", async () => {
  approvalProposal = await proposalOf("Two approvals");
  await shot(page, "proposals");
  await accessible(page, "proposals");
  await page.goto(approvalProposal);
  await expect(page.getByTestId("approvals")).toHaveText("0 of 2");
  const box = page.getByRole("combobox", { name: "Comment" });
  await box.click();
  await box.pressSequentially("Can you check the web tier first, @bo");
  const option = page.getByRole("option", { name: /bob@acme\.example/ });
  await expect(option).toBeVisible();
  await box.press("Enter");
  await expect(box).toHaveValue(`Can you check the web tier first, @${OPERATOR} `);
  await box.pressSequentially("? Thanks.");
  await page.getByRole("button", { name: "Comment", exact: true }).click();
  await expect(page.locator("ol.comments")).toContainText("Can you check the web tier first");
  await expect(page.locator("ol.comments")).toContainText("Mentions:");
  await waitForEmail(OPERATOR, /mentioned you/);
  await shot(page, "proposal-detail");
  await accessible(page, "proposal detail");
});

test("see what approving would do before the approve button: reboots, restarts, each host", async () => {
  await page.goto(approvalProposal);
  const panel = page.getByRole("region", { name: "What approving does" });
  await expect(panel).toBeVisible();
  const hosts = Number(await panel.getByTestId("impact-hosts").textContent());
  expect(hosts).toBeGreaterThan(0);
  await expect(panel.getByTestId("impact-rebooting")).toHaveText(/^\d+ hosts?$/);
  // fleet-sim's hosts: OpenSSL and the SSH server restart ssh.service; one staging host's
  // agent does not say (unknown, not "no impact").
  await expect(panel.getByRole("heading", { name: "Units restarting" })).toBeVisible();
  await expect(panel).toContainText("ssh.service");
  await expect(panel.getByTestId("impact-unknown")).toHaveText(/^1 host /);
  // Before the approve button, on the page and to the keyboard.
  const approve = page.getByRole("button", { name: "Approve" });
  const [panelBox, approveBox] = [await panel.boundingBox(), await approve.boundingBox()];
  expect(panelBox && approveBox && panelBox.y < approveBox.y).toBe(true);
  expect(
    await panel.evaluate((el, button) => !!(el.compareDocumentPosition(button!) & Node.DOCUMENT_POSITION_FOLLOWING), await approve.elementHandle()),
  ).toBe(true);
  await panel.getByRole("button", { name: "Each host's impact" }).click();
  const rows = panel.getByRole("table", { name: "Each host's impact" }).locator("tbody tr");
  await expect(rows).toHaveCount(Math.min(hosts, 50));
  await expect(rows.filter({ hasText: "unknown" })).toHaveCount(1);
  await shot(page, "proposal-impact");
  await accessible(page, "proposal impact");
});

test("approve as two different people in two browsers: approved", async () => {
  await page.getByRole("button", { name: "Approve" }).click();
  await expect(page.getByTestId("approvals")).toHaveText("1 of 2");
  await expect(page.locator(".progress-line")).toContainText("1 more needed");

  const p = await bob.newPage();
  await p.goto(approvalProposal);
  await expect(p.getByTestId("approvals")).toHaveText("1 of 2");
  await p.getByRole("button", { name: "Approve" }).click();
  await expect(p.getByTestId("approvals")).toHaveText("2 of 2");
  await expect(p.locator(".crumbs .badge").first()).toHaveText(/approved|applying|applied/);

  await page.reload();
  await expect(page.locator(".crumbs .badge").first()).toHaveText(/approved|applying|applied/);
  await expect(page.locator("ol.decisions")).toContainText("Olivia Owner");
});

test("reject another proposal with a reason", async () => {
  const other = await proposalOf("One approval");
  await page.goto(other);
  await page.getByRole("button", { name: "Reject…" }).click();
  await page.getByLabel("Reason for rejecting").fill("Not during the freeze.");
  await page.getByRole("button", { name: "Reject proposal" }).click();
  await expect(page.locator(".crumbs .badge").first()).toHaveText("rejected");
  await expect(page.locator("ol.decisions")).toContainText("Not during the freeze.");
});

test("a viewer sees no approve button and no comment box", async () => {
  const p = await vic.newPage();
  await p.goto(approvalProposal);
  await expect(p.getByTestId("approvals")).toBeVisible();
  await expect(p.getByRole("heading", { name: "Changes" })).toBeVisible();
  await expect(p.getByRole("button", { name: "Approve" })).toHaveCount(0);
  await expect(p.getByRole("combobox", { name: "Comment" })).toHaveCount(0);
  await expect(p.getByRole("heading", { name: "Discussion" })).toHaveCount(0);
  await accessible(p, "proposal as a viewer");
});

test("a policy that goes out in waves shows each wave's hosts before it is saved", async () => {
  await page.getByRole("link", { name: "Policies" }).first().click();
  await page.getByRole("link", { name: "New policy" }).click();
  await page.getByLabel("Name", { exact: true }).fill("In waves");
  await page.getByLabel("Approvals needed").fill("0");
  await page.getByLabel("Go out in waves").check();
  await page.getByLabel("Wave 1 name").fill("canary");
  await page.getByLabel("Wave 1 size").fill("2");
  await page.getByLabel("Wave 1 canaries (selector, optional)").fill("env=staging");
  await page.getByRole("button", { name: "Add a wave" }).click();
  await page.getByLabel("Wave 2 name").fill("half");
  await page.getByLabel("Wave 2 size").fill("50%");
  const sizes = page.getByRole("table", { name: "Wave sizes now" });
  await expect(sizes.locator("tbody tr")).toHaveText([/canary\s*2/, /half\s*5/, /rest\s*3/]);
  // A size the service refuses is said in its words, and nothing is saved.
  await page.getByLabel("Wave 1 size").fill("0");
  await expect(page.getByRole("alert").filter({ hasText: "waves[0].size" })).toBeVisible();
  await page.getByLabel("Wave 1 size").fill("2");
  await expect(sizes.locator("tbody tr").first()).toHaveText(/canary\s*2/);
  await page.getByLabel("Halt after failures").fill("10%");
  await page.getByLabel("Soak (minutes)").fill("30");
  await shot(page, "policy-rollout");
  await accessible(page, "policy form with a rollout");
  await page.getByRole("button", { name: "Create policy" }).click();
  await expect(page.getByRole("heading", { name: "In waves" })).toBeVisible();
  await page.getByRole("link", { name: "Policies" }).first().click();
  await expect(page.locator("article").filter({ hasText: "In waves" })).toContainText("canary 2 → half 50% → rest");
});

test("the proposal goes out wave by wave; an operator halts it and resumes it", async () => {
  const inWaves = await proposalOf("In waves", "approved");
  const p = await bob.newPage();
  await p.goto(inWaves);
  const rollout = p.getByRole("region", { name: "Rollout" });
  await expect(p.getByTestId("rollout-state")).toContainText("running");
  await expect(p.getByTestId("rollout-state")).toContainText(/wave 1 of \d+, canary/);
  await expect(rollout.locator("tbody tr").first()).toContainText("canary");
  await expect(rollout.locator("tbody tr").nth(1)).toContainText("half");
  await p.getByRole("button", { name: "Halt rollout…" }).click();
  await p.getByLabel("Reason for halting").fill("The canaries' mirror is stale.");
  await p.getByRole("button", { name: "Halt: no new jobs" }).click();
  await expect(p.getByTestId("rollout-state")).toContainText("halted");
  await expect(p.getByTestId("halted-reason")).toHaveText("The canaries' mirror is stale.");
  await shotOf(rollout, "proposal-rollout-halted");
  await accessible(p, "proposal with a halted rollout");

  const v = await vic.newPage();
  await v.goto(inWaves);
  await expect(v.getByTestId("rollout-state")).toContainText("halted");
  await expect(v.getByRole("button", { name: "Resume rollout" })).toHaveCount(0);

  await p.getByRole("button", { name: "Resume rollout" }).click();
  await expect(p.getByTestId("rollout-state")).toContainText("running");
  await expect(p.getByTestId("halted-reason")).toHaveCount(0);
  await shotOf(rollout, "proposal-rollout");
});

test("an admin sets the reboot budget; an operator sees it and cannot change it", async () => {
  await page.getByRole("link", { name: "Organization" }).click();
  await expect(page.getByTestId("reboot-budget")).toHaveText("No limit: any number of hosts may reboot at once.");
  await page.getByLabel("Limit how many hosts reboot at once").check();
  await page.getByLabel("Hosts rebooting at once, at most").fill("2");
  await page.getByRole("button", { name: "Save reboot budget" }).click();
  await expect(page.getByTestId("reboot-budget")).toHaveText("At most 2 hosts reboot at once.");
  await shot(page, "organization");
  await accessible(page, "organization");
  const p = await bob.newPage();
  await p.goto("/orgs/acme/settings");
  await expect(p.getByTestId("reboot-budget")).toHaveText("At most 2 hosts reboot at once.");
  await expect(p.getByRole("button", { name: "Save reboot budget" })).toHaveCount(0);
  await expect(p.getByText("Admins change it.")).toBeVisible();
});

test("make a webhook channel, send a test, see the delivery", async () => {
  await page.getByRole("link", { name: "Notifications" }).click();
  await page.getByText("New channel").click();
  await page.getByLabel("Kind").selectOption("webhook");
  await page.getByLabel("Name", { exact: true }).fill("ops hook");
  await page.getByLabel("URL (https)").fill(env.receiver());
  await page.getByRole("button", { name: "Create channel" }).click();
  const secret = await page.getByLabel("Signing secret (verify webhooks with it)").inputValue();
  expect(secret).toMatch(/^whsec_/);
  await page.getByRole("button", { name: "Done" }).click();
  await accessible(page, "notifications");
  await page.getByRole("link", { name: "ops hook" }).click();
  await page.getByRole("button", { name: "Send a test" }).click();
  await expect(page.getByText("Test queued.")).toBeVisible();
  const delivery = page.locator("ol.deliveries > li").filter({ hasText: "test" }).first();
  await expect(delivery).toContainText("delivered", { timeout: 30_000 });
  await expect(delivery).toContainText("HTTP 200");
  await shot(page, "channel-deliveries");
});

test("at a phone's width the navigation is a menu and pages still work", async () => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/orgs/acme/hosts");
  await expect(page.getByRole("link", { name: "Groups" })).toBeHidden();
  await page.getByRole("button", { name: "Menu" }).click();
  await page.getByRole("link", { name: "Proposals" }).click();
  await expect(page.getByRole("heading", { name: "Proposals" })).toBeVisible();
  await shot(page, "phone-proposals");
  await accessible(page, "proposals on a phone");
  await page.setViewportSize({ width: 1280, height: 900 });
});

test("the keyboard reaches the skip link and the navigation", async () => {
  await page.goto("/orgs/acme/hosts");
  // The frame (skip link, navigation) renders once the session is read; a Tab pressed before
  // that lands on nothing and the next one passes the skip link by.
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
  await expect(page.getByRole("link", { name: "Groups" })).toBeVisible();
  await page.keyboard.press("Tab");
  await expect(page.getByRole("link", { name: "Skip to content" })).toBeFocused();
  let reached = false;
  for (let i = 0; i < 12 && !reached; i++) {
    await page.keyboard.press("Tab");
    reached = await page.getByRole("link", { name: "Groups" }).evaluate((el) => el === document.activeElement);
  }
  expect(reached, "Tab reaches the Groups link").toBe(true);
  await page.keyboard.press("Enter");
  await expect(page.getByRole("heading", { name: "Groups" })).toBeVisible();
});

test("a session that ended goes back to sign-in, and back to the page after", async () => {
  await page.goto("/orgs/acme/policies");
  await expect(page.getByRole("heading", { name: "Policies" })).toBeVisible();
  // End the session behind the page's back (as expiry would): its next request is refused.
  const me = await (await page.request.get("/v1/me")).json();
  const ended = await page.request.post("/v1/auth/sign-out", { headers: { "X-Service-Csrf": me.csrf_token } });
  expect(ended.ok()).toBe(true);
  await page.getByRole("link", { name: "Hosts" }).click();
  await expect(page).toHaveURL(/\/sign-in\?expired=1&next=%2Forgs%2Facme%2Fhosts/);
  await expect(page.getByText("Your session has ended")).toBeVisible();
  await page.getByLabel("Email address").fill(OWNER);
  await page.getByRole("button", { name: "Email me a sign-in link" }).click();
  const link = await emailedLink(OWNER, "/sign-in/verify");
  await page.goto(link);
  await expect(page).toHaveURL(/\/orgs\/acme\/hosts$/);
  await expect(page.getByRole("heading", { name: "Hosts" })).toBeVisible();
});
