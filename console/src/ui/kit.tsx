// Small building blocks every page uses: errors in the problem body's words, loading states,
// a cursor pager, copyable secrets, dates, and forms that report what the API refused.
import { useEffect, useId, useState, type ReactNode } from "react";
import { errorText } from "../api/client";

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p className="error" role="alert">
      {errorText(error)}
    </p>
  );
}

export function Loading({ what = "Loading" }: { what?: string }) {
  return (
    <p className="muted" role="status" aria-live="polite">
      {what}…
    </p>
  );
}

/** A query's states in one place: loading, error, or the data. */
export function Loaded<T>({
  query,
  children,
}: {
  query: { isPending: boolean; error: unknown; data: T | undefined };
  children: (data: T) => ReactNode;
}) {
  if (query.error) return <ErrorNote error={query.error} />;
  if (query.isPending || query.data === undefined) return <Loading />;
  return <>{children(query.data)}</>;
}

export function PageTitle({ children, actions }: { children: ReactNode; actions?: ReactNode }) {
  useEffect(() => {
    if (typeof children === "string") document.title = `${children} · Fleet updates`;
  }, [children]);
  return (
    <div className="page-title">
      <h1>{children}</h1>
      {actions && <div className="actions">{actions}</div>}
    </div>
  );
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

export function When({ at, zone }: { at: string | null | undefined; zone?: string }) {
  if (!at) return <span className="muted">—</span>;
  const date = new Date(at);
  const text = zone
    ? new Intl.DateTimeFormat(undefined, {
        dateStyle: "full",
        timeStyle: "short",
        timeZone: zone,
      }).format(date)
    : dateTime.format(date);
  return <time dateTime={at}>{text}</time>;
}

/** Pages of a cursor-paged list (decisions §5): the cursors seen so far, to go back. */
export function useCursorPages() {
  const [stack, setStack] = useState<string[]>([]);
  const cursor = stack[stack.length - 1];
  return {
    cursor,
    page: stack.length + 1,
    next: (c: string) => setStack((s) => [...s, c]),
    previous: () => setStack((s) => s.slice(0, -1)),
    reset: () => setStack([]),
  };
}

export function Pager({
  pages,
  nextCursor,
}: {
  pages: ReturnType<typeof useCursorPages>;
  nextCursor: string | null | undefined;
}) {
  if (pages.page === 1 && !nextCursor) return null;
  return (
    <nav className="pager" aria-label="Pages">
      <button type="button" onClick={pages.previous} disabled={pages.page === 1}>
        ← Previous
      </button>
      <span>Page {pages.page}</span>
      <button type="button" onClick={() => nextCursor && pages.next(nextCursor)} disabled={!nextCursor}>
        Next →
      </button>
    </nav>
  );
}

/** A value shown once (a token, a secret), with a copy button. */
export function Secret({ label, value }: { label: string; value: string }) {
  const [copied, setCopied] = useState(false);
  const id = useId();
  return (
    <div className="secret">
      <label htmlFor={id}>{label}</label>
      <div className="row">
        <input id={id} readOnly value={value} onFocus={(e) => e.currentTarget.select()} />
        <button
          type="button"
          onClick={() => {
            void navigator.clipboard?.writeText(value).then(() => setCopied(true));
          }}
        >
          {copied ? "Copied" : "Copy"}
        </button>
      </div>
      <p className="muted small">Shown once: only a hash is kept.</p>
    </div>
  );
}

export function CopyBlock({ label, text }: { label: string; text: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <figure className="copy-block">
      <figcaption>
        {label}
        <button
          type="button"
          className="link"
          onClick={() => void navigator.clipboard?.writeText(text).then(() => setCopied(true))}
        >
          {copied ? "Copied" : "Copy"}
        </button>
      </figcaption>
      <pre tabIndex={0}>{text}</pre>
    </figure>
  );
}

export function Field({
  label,
  hint,
  children,
}: {
  label: string;
  hint?: ReactNode;
  children: (id: string) => ReactNode;
}) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children(id)}
      {hint && <p className="hint">{hint}</p>}
    </div>
  );
}

export function Badge({ tone, children }: { tone?: string; children: ReactNode }) {
  return <span className={`badge ${tone ?? ""}`}>{children}</span>;
}

const STATUS_TONE: Record<string, string> = {
  online: "good",
  applied: "good",
  approved: "good",
  delivered: "good",
  offline: "warn",
  pending: "muted",
  open: "info",
  scheduled: "info",
  applying: "info",
  snoozed: "muted",
  failed: "bad",
  rejected: "bad",
  partially_applied: "warn",
  decommissioned: "muted",
  critical: "bad",
  high: "bad",
  medium: "warn",
  low: "muted",
};

export function Status({ value }: { value: string | null | undefined }) {
  if (!value) return <span className="muted">—</span>;
  return <Badge tone={STATUS_TONE[value]}>{value.replace(/_/g, " ")}</Badge>;
}

export function Kev() {
  return (
    <Badge tone="bad">
      <abbr title="On the public known-exploited-vulnerabilities catalogue">KEV</abbr>
    </Badge>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

export function Labels({ labels }: { labels: Record<string, string> }) {
  const entries = Object.entries(labels);
  if (entries.length === 0) return <span className="muted">none</span>;
  return (
    <span className="labels">
      {entries.map(([k, v]) => (
        <code key={k} className="label">
          {k}={v}
        </code>
      ))}
    </span>
  );
}

/** `a=b, c=d` as a label map; the text that does not parse is returned as an error. */
export function parseLabels(text: string): { labels: Record<string, string>; error?: string } {
  const labels: Record<string, string> = {};
  for (const part of text.split(/[,\n]/)) {
    const item = part.trim();
    if (!item) continue;
    const eq = item.indexOf("=");
    if (eq <= 0) return { labels, error: `"${item}" is not key=value` };
    labels[item.slice(0, eq).trim()] = item.slice(eq + 1).trim();
  }
  return { labels };
}

export function formatLabels(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

/** A value that settles `ms` after the last change (for live counts while typing). */
export function useDebounced<T>(value: T, ms = 300): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return settled;
}

/** A destructive action that asks once more before it runs. */
export function ConfirmButton({
  label,
  confirm,
  onConfirm,
  disabled,
  what,
}: {
  label: string;
  confirm: string;
  onConfirm: () => void;
  disabled?: boolean;
  /** What it acts on, for screen readers when several such buttons share a page. */
  what?: string;
}) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button type="button" className="danger" onClick={() => setAsking(true)} disabled={disabled}>
        {label}
        {what && <span className="sr-only"> {what}</span>}…
      </button>
    );
  }
  return (
    <span className="confirm" role="group" aria-label={label}>
      <button
        type="button"
        className="danger"
        onClick={() => {
          setAsking(false);
          onConfirm();
        }}
        disabled={disabled}
      >
        {confirm}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}
