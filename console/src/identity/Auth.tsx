// Signing in and up: the emailed-link requests, the pages those links land on (they sign in
// and go on), single sign-on, and accepting an invitation. A page that sent somebody to sign
// in is remembered (in this browser, for an hour) so that the emailed link brings them back.
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef, useState, type FormEvent } from "react";
import { Link, useLocation, useSearch } from "wouter";
import { api, setCsrfToken, unwrap } from "../api/client";
import { meKey } from "../api/session";
import { ErrorNote, Field, Loading } from "../ui/kit";

const NEXT_KEY = "fleet.next";

function rememberNext(next: string | null) {
  if (next && next.startsWith("/") && !next.startsWith("//")) {
    localStorage.setItem(NEXT_KEY, JSON.stringify({ next, at: Date.now() }));
  }
}

function takeNext(): string {
  const raw = localStorage.getItem(NEXT_KEY);
  localStorage.removeItem(NEXT_KEY);
  try {
    const { next, at } = JSON.parse(raw ?? "null") as { next: string; at: number };
    if (Date.now() - at < 3_600_000 && next.startsWith("/") && !next.startsWith("//")) return next;
  } catch {
    // Nothing remembered.
  }
  return "/";
}

function AuthCard({ title, children }: { title: string; children: React.ReactNode }) {
  useEffect(() => {
    document.title = `${title} · Fleet updates`;
  }, [title]);
  return (
    <main id="main" className="auth">
      <div className="card">
        <p className="brand">Fleet updates</p>
        <h1>{title}</h1>
        {children}
      </div>
    </main>
  );
}

export function SignInPage() {
  const params = new URLSearchParams(useSearch());
  const [email, setEmail] = useState("");
  const [, navigate] = useLocation();
  const next = params.get("next");
  const send = useMutation({
    mutationFn: async (address: string) =>
      unwrap(await api.POST("/v1/auth/magic-link", { body: { email: address } })),
  });
  const [ssoError, setSsoError] = useState<string | null>(null);
  useEffect(() => rememberNext(next), [next]);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    send.mutate(email.trim());
  };
  const sso = () => {
    const address = email.trim();
    if (!address.includes("@")) {
      setSsoError("Enter your work email address first: it names your organization's sign-in.");
      return;
    }
    window.location.assign(`/v1/auth/sso/start?email=${encodeURIComponent(address)}`);
  };
  return (
    <AuthCard title="Sign in">
      {params.get("expired") && (
        <p className="notice" role="status">
          Your session has ended. Sign in again to go back to where you were.
        </p>
      )}
      {send.isSuccess ? (
        <div role="status">
          <p>
            If <strong>{email}</strong> has an account, a sign-in link is on its way. It works once,
            for 15 minutes.
          </p>
          <button type="button" className="link" onClick={() => send.reset()}>
            Use another address
          </button>
        </div>
      ) : (
        <form onSubmit={submit}>
          <Field label="Email address">
            {(id) => (
              <input
                id={id}
                type="email"
                autoComplete="email"
                required
                value={email}
                onChange={(e) => setEmail(e.target.value)}
              />
            )}
          </Field>
          <ErrorNote error={send.error} />
          {ssoError && (
            <p className="error" role="alert">
              {ssoError}
            </p>
          )}
          <div className="buttons">
            <button type="submit" className="primary" disabled={send.isPending}>
              Email me a sign-in link
            </button>
            <button type="button" onClick={sso}>
              Single sign-on
            </button>
          </div>
        </form>
      )}
      <p className="muted">
        New here? <Link href="/sign-up">Create an organization</Link>.{" "}
        {next && (
          <button type="button" className="link" onClick={() => navigate("/")}>
            Start over
          </button>
        )}
      </p>
    </AuthCard>
  );
}

function slugOf(name: string): string {
  return name
    .toLowerCase()
    .normalize("NFKD")
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 40);
}

export function SignUpPage() {
  const [form, setForm] = useState({ email: "", name: "", orgName: "", slug: "" });
  const [slugTouched, setSlugTouched] = useState(false);
  const send = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/auth/sign-up", {
          body: {
            email: form.email.trim(),
            name: form.name.trim(),
            organization: { name: form.orgName.trim(), slug: form.slug.trim() },
          },
        }),
      ),
  });
  const set = (key: keyof typeof form) => (e: React.ChangeEvent<HTMLInputElement>) => {
    const value = e.target.value;
    setForm((f) => ({
      ...f,
      [key]: value,
      ...(key === "orgName" && !slugTouched ? { slug: slugOf(value) } : {}),
    }));
    if (key === "slug") setSlugTouched(true);
  };
  return (
    <AuthCard title="Create an organization">
      {send.isSuccess ? (
        <p role="status">
          Check <strong>{form.email}</strong>: the link in the email signs you in to{" "}
          <strong>{form.orgName}</strong>. It works once, for 15 minutes.
        </p>
      ) : (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            send.mutate();
          }}
        >
          <Field label="Your email address">
            {(id) => <input id={id} type="email" autoComplete="email" required value={form.email} onChange={set("email")} />}
          </Field>
          <Field label="Your name">
            {(id) => <input id={id} autoComplete="name" required value={form.name} onChange={set("name")} />}
          </Field>
          <Field label="Organization name">
            {(id) => <input id={id} autoComplete="organization" required value={form.orgName} onChange={set("orgName")} />}
          </Field>
          <Field label="Address in paths (slug)" hint="Lowercase letters, digits and hyphens.">
            {(id) => <input id={id} required value={form.slug} onChange={set("slug")} pattern="[a-z0-9][a-z0-9-]*" />}
          </Field>
          <ErrorNote error={send.error} />
          <button type="submit" className="primary" disabled={send.isPending}>
            Email me a link to start
          </button>
        </form>
      )}
      <p className="muted">
        Have an account? <Link href="/sign-in">Sign in</Link>.
      </p>
    </AuthCard>
  );
}

/** Tokens already sent this page load: a verify token works once. */
const spent = new Set<string>();

/** The page an emailed sign-in or sign-up link opens: it signs in and goes on. */
export function VerifyPage({ kind }: { kind: "sign-in" | "sign-up" }) {
  const token = new URLSearchParams(useSearch()).get("token") ?? "";
  const [, navigate] = useLocation();
  const queries = useQueryClient();
  const [error, setError] = useState<unknown>(null);
  const started = useRef(false);
  useEffect(() => {
    if (started.current || spent.has(token)) return;
    started.current = true;
    spent.add(token);
    // The token is in the address: take it out of history at once.
    window.history.replaceState(null, "", window.location.pathname);
    void (async () => {
      try {
        const body = { token };
        const session = unwrap(
          kind === "sign-in"
            ? await api.POST("/v1/auth/magic-link/verify", { body })
            : await api.POST("/v1/auth/sign-up/verify", { body }),
        );
        setCsrfToken(session.csrf_token);
        await queries.invalidateQueries({ queryKey: meKey });
        navigate(takeNext(), { replace: true });
      } catch (e) {
        setError(e);
      }
    })();
  }, [token, kind, navigate, queries]);
  if (!token) {
    return (
      <AuthCard title="Sign in">
        <p className="error" role="alert">
          This link has no token. <Link href="/sign-in">Ask for a new link</Link>.
        </p>
      </AuthCard>
    );
  }
  return (
    <AuthCard title={kind === "sign-in" ? "Signing in" : "Creating your organization"}>
      {error ? (
        <>
          <ErrorNote error={error} />
          <p>
            <Link href="/sign-in">Ask for a new link</Link>
          </p>
        </>
      ) : (
        <Loading what="Signing you in" />
      )}
    </AuthCard>
  );
}

export function AcceptInvitationPage() {
  const [token] = useState(() => new URLSearchParams(window.location.search).get("token") ?? "");
  const [, navigate] = useLocation();
  const queries = useQueryClient();
  useEffect(() => {
    if (token) window.history.replaceState(null, "", window.location.pathname);
  }, [token]);
  const accept = useMutation({
    mutationFn: async () => unwrap(await api.POST("/v1/invitations/accept", { body: { token } })),
    onSuccess: async (session) => {
      setCsrfToken(session.csrf_token);
      await queries.invalidateQueries({ queryKey: meKey });
      navigate("/", { replace: true });
    },
  });
  return (
    <AuthCard title="Join the organization">
      {!token ? (
        <p className="error" role="alert">
          This link has no invitation token. Ask whoever invited you to send it again.
        </p>
      ) : (
        <>
          <p>You were invited to an organization. Accepting signs you in as the invited address.</p>
          <ErrorNote error={accept.error} />
          <button type="button" className="primary" onClick={() => accept.mutate()} disabled={accept.isPending}>
            Accept the invitation
          </button>
        </>
      )}
    </AuthCard>
  );
}
