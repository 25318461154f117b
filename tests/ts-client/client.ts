// A small client written against the TypeScript types that `openapi-typescript` generates from
// tests/openapi.json (`.ci/ts-client` generates `schema.d.ts` here and runs `tsc --noEmit`).
// It exists to prove the document is exact enough for a generated client: if a field the
// service sends as null were typed as a plain string, or a required one optional, the
// comparisons below would stop compiling.

import type { components, operations } from "./schema";

type Schemas = components["schemas"];
type Json = "application/json; charset=utf-8";

/** The JSON body an operation takes. */
type Body<Op extends keyof operations> = operations[Op] extends {
  requestBody: { content: { [K in Json]: infer B } };
}
  ? B
  : never;

/** The JSON answer of an operation with status `S`. */
type Answer<Op extends keyof operations, S extends number> = operations[Op] extends {
  responses: { [K in S]: { content: { [J in Json]: infer A } } };
}
  ? A
  : never;

/** Compiles only when `T` is `true`. */
type Holds<T extends true> = T;
/** Whether `null` is a value of `T`. */
type Nullable<T> = null extends T ? true : false;

// The service sends null in these fields; a generated client must be told so.
export type NullsTheServiceSends = [
  Holds<Nullable<Schemas["Page_Host"]["next_cursor"]>>,
  Holds<Nullable<Schemas["Me"]["csrf_token"]>>,
  Holds<Nullable<Schemas["Host"]["display_name"]>>,
  Holds<Nullable<Schemas["Host"]["decommissioned_at"]>>,
  Holds<Nullable<Schemas["ApiTokenRecord"]["expires_at"]>>,
  Holds<Nullable<Schemas["EnrollmentToken"]["revoked_at"]>>,
  Holds<Nullable<Schemas["Group"]["selector"]>>,
  Holds<Nullable<Schemas["AuditEvent"]["actor_api_token_id"]>>,
  Holds<Nullable<Schemas["AdvisoryView"]["title"]>>,
];

/** Every error is a problem (decisions §1). */
export class ProblemError extends Error {
  constructor(readonly problem: Schemas["Problem"]) {
    super(`${problem.status} ${problem.type}: ${problem.detail ?? problem.title}`);
  }
}

export class Client {
  private cookie: string | undefined;
  private csrf: string | undefined;

  constructor(private readonly base: string) {}

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.cookie !== undefined) headers["cookie"] = this.cookie;
    if (this.csrf !== undefined && method !== "GET") headers["x-service-csrf"] = this.csrf;
    const response = await fetch(`${this.base}${path}`, {
      method,
      headers,
      body: body === undefined ? null : JSON.stringify(body),
    });
    if (!response.ok) {
      throw new ProblemError((await response.json()) as Schemas["Problem"]);
    }
    const cookie = response.headers.get("set-cookie");
    if (cookie !== null) this.cookie = cookie.split(";")[0];
    return (response.status === 204 ? undefined : await response.json()) as T;
  }

  /** Sign-in, step 1: the service emails a link with a one-time token. */
  async requestSignIn(email: string): Promise<void> {
    const body: Body<"requestMagicLink"> = { email };
    await this.call<void>("POST", "/v1/auth/magic-link", body);
  }

  /** Sign-in, step 2: the token from the link starts a session (cookie and CSRF token). */
  async signIn(token: string): Promise<Schemas["Me"]> {
    const body: Body<"verifyMagicLink"> = { token };
    const session = await this.call<Answer<"verifyMagicLink", 200>>(
      "POST",
      "/v1/auth/magic-link/verify",
      body,
    );
    this.csrf = session.csrf_token;
    const me = await this.call<Answer<"getMe", 200>>("GET", "/v1/me");
    // Present with a session, null with an API token: the type must say both.
    if (me.csrf_token === null) throw new Error("a session always has a CSRF token");
    return me;
  }

  /** Every host of `org` matching `selector`, page by page. */
  async *hosts(org: string, selector?: string): AsyncGenerator<Schemas["Host"]> {
    let cursor: string | null | undefined;
    do {
      const query: NonNullable<operations["listHosts"]["parameters"]["query"]> = { limit: 100 };
      if (selector !== undefined) query.selector = selector;
      if (cursor) query.cursor = cursor;
      const search = new URLSearchParams(
        Object.entries(query).map(([key, value]) => [key, String(value)]),
      );
      const page = await this.call<Answer<"listHosts", 200>>(
        "GET",
        `/v1/orgs/${encodeURIComponent(org)}/hosts?${search}`,
      );
      yield* page.items;
      // null on the last page.
      cursor = page.next_cursor === null ? null : page.next_cursor;
    } while (cursor);
  }

  /** Approves a proposal as the signed-in person. */
  async approve(org: string, proposalId: string): Promise<Schemas["ApprovalSummary"]> {
    return this.call<Answer<"approveProposal", 200>>(
      "POST",
      `/v1/orgs/${encodeURIComponent(org)}/proposals/${encodeURIComponent(proposalId)}/approve`,
    );
  }
}

/** What a person would do: sign in, look at the fleet, approve the first open proposal. */
export async function example(base: string, email: string, token: string): Promise<void> {
  const client = new Client(base);
  await client.requestSignIn(email);
  const me = await client.signIn(token);
  const org = me.organizations[0]?.slug;
  if (org === undefined) return;
  for await (const host of client.hosts(org, "env=prod")) {
    const name: string = host.display_name ?? host.hostname;
    const seen: string = host.last_seen_at === null ? "never" : (host.last_seen_at ?? "unknown");
    console.log(`${name}: ${host.status}, last seen ${seen}`);
  }
  const proposals = await (async () => {
    const response = await fetch(`${base}/v1/orgs/${org}/proposals`);
    return (await response.json()) as Answer<"listProposals", 200>;
  })();
  const first = proposals.items[0];
  if (first !== undefined) {
    const summary = await client.approve(org, first.id);
    console.log(`${first.id}: ${summary.status}, ${summary.approvals}/${summary.required}`);
  }
}
