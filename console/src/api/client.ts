// The one client of the API: openapi-fetch over the types openapi-typescript generates from
// tests/openapi.json (schema.d.ts). No request or response type is written by hand here or in
// any page: a change of the document that breaks a page breaks `tsc`.
//
// What every call gets from here:
// - the session cookie (same origin) and, on every mutation, `X-Service-Csrf` (decisions §3);
// - a 429 waits for `Retry-After` and is sent again (up to three times), with a notice shown;
// - a 401 outside sign-in means the session ended: the app goes to sign-in and comes back;
// - an error answer becomes a `ProblemError` carrying the problem body's words.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Problem = Schemas["Problem"];

let csrfToken: string | null = null;

/** Remembers the session's CSRF token (from a verify answer or `GET /v1/me`). */
export function setCsrfToken(token: string | null | undefined): void {
  csrfToken = token ?? null;
}

type Listener = () => void;
const unauthenticatedListeners = new Set<Listener>();
const waitListeners = new Set<(seconds: number | null) => void>();

/** Called when an answer says the session is gone (401 outside the sign-in operations). */
export function onUnauthenticated(listener: Listener): () => void {
  unauthenticatedListeners.add(listener);
  return () => unauthenticatedListeners.delete(listener);
}

/** Called with the seconds a rate-limited request waits, and with null when it goes again. */
export function onRateLimitWait(listener: (seconds: number | null) => void): () => void {
  waitListeners.add(listener);
  return () => waitListeners.delete(listener);
}

const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);
const RETRIES = 3;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Seconds to wait from a `Retry-After` header (whole seconds, or an HTTP date). */
export function retryAfterSeconds(value: string | null): number {
  if (!value) return 1;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.min(Math.max(seconds, 0), 60);
  const date = Date.parse(value);
  return Number.isNaN(date) ? 1 : Math.min(Math.max((date - Date.now()) / 1000, 0), 60);
}

async function send(request: Request): Promise<Response> {
  if (!SAFE.has(request.method) && csrfToken) {
    request.headers.set("X-Service-Csrf", csrfToken);
  }
  for (let attempt = 0; ; attempt++) {
    const response = await fetch(request.clone());
    if (response.status === 429 && attempt < RETRIES) {
      const seconds = retryAfterSeconds(response.headers.get("Retry-After"));
      waitListeners.forEach((l) => l(seconds));
      await sleep(seconds * 1000);
      waitListeners.forEach((l) => l(null));
      continue;
    }
    if (response.status === 401 && !new URL(request.url).pathname.startsWith("/v1/auth/")) {
      unauthenticatedListeners.forEach((l) => l());
    }
    return response;
  }
}

export const api = createClient<paths>({
  baseUrl: window.location.origin,
  credentials: "same-origin",
  fetch: send,
});

/** An error answer of the API, in the problem body's words (decisions §1). */
export class ProblemError extends Error {
  readonly status: number;
  readonly type: string;
  readonly detail: string | null;

  constructor(problem: Partial<Problem> & { status: number }) {
    const words = problem.detail ?? problem.title ?? `The service answered ${problem.status}.`;
    super(words);
    this.status = problem.status;
    this.type = problem.type ?? "unknown";
    this.detail = problem.detail ?? null;
  }
}

/** The answer's data, or a `ProblemError` made of its problem body. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.response.ok && result.error === undefined) {
    return result.data as T;
  }
  const body = result.error;
  if (body && typeof body === "object" && "status" in body) {
    throw new ProblemError(body as Problem);
  }
  throw new ProblemError({
    status: result.response.status,
    detail: `The service answered ${result.response.status} ${result.response.statusText}.`,
  });
}

/** Words for any error a page shows. */
export function errorText(error: unknown): string {
  if (error instanceof ProblemError) return error.message;
  if (error instanceof TypeError) return "The service cannot be reached. Check your connection.";
  if (error instanceof Error) return error.message;
  return "Something went wrong.";
}
