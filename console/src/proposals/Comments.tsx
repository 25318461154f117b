// A proposal's discussion: the most recent comments (older pages on request) and a comment
// box whose `@` completes members' addresses (`listMentionable`). A completed mention is
// written as `@address`, which names exactly one member however names repeat.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useId, useRef, useState, type KeyboardEvent } from "react";
import { api, unwrap, type Schemas } from "../api/client";
import { ErrorNote, Loaded, When, useDebounced } from "../ui/kit";

type Person = Schemas["CommentPerson"];

export function Comments({ org, id }: { org: string; id: string }) {
  const [before, setBefore] = useState<string | undefined>(undefined);
  const thread = useQuery({
    queryKey: ["comments", org, id, before],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/proposals/{proposal_id}/comments", {
          params: { path: { org, proposal_id: id }, query: { before } },
        }),
      ),
  });
  return (
    <section className="panel" aria-labelledby="discussion">
      <h2 id="discussion">Discussion</h2>
      <Loaded query={thread}>
        {(list) => (
          <>
            {list.total > list.comments.length && list.comments[0] && (
              <button type="button" className="link" onClick={() => setBefore(list.comments[0]?.id)}>
                Earlier comments ({list.total - list.comments.length} more)
              </button>
            )}
            {before && (
              <button type="button" className="link" onClick={() => setBefore(undefined)}>
                Latest comments
              </button>
            )}
            {list.comments.length === 0 && <p className="muted">No comment yet.</p>}
            <ol className="comments">
              {list.comments.map((c) => (
                <li key={c.id}>
                  <p className="meta">
                    <strong>{c.author.name ?? c.author.email}</strong> <When at={c.written_at} />
                  </p>
                  <p className="body">{c.body}</p>
                  {c.mentions.length > 0 && (
                    <p className="muted small">Mentions: {c.mentions.map((m) => m.name ?? m.email).join(", ")}</p>
                  )}
                </li>
              ))}
            </ol>
          </>
        )}
      </Loaded>
      <CommentBox org={org} id={id} onWritten={() => setBefore(undefined)} />
    </section>
  );
}

/** The `@word` the caret is in, if any: where it starts and what is typed after `@`. */
function mentionAt(text: string, caret: number): { start: number; query: string } | null {
  const upto = text.slice(0, caret);
  const match = /(^|[^\p{L}\p{N}_.+@-])@([^\s@]{0,64})$/u.exec(upto);
  if (!match) return null;
  return { start: caret - match[2]!.length - 1, query: match[2]! };
}

function CommentBox({ org, id, onWritten }: { org: string; id: string; onWritten: () => void }) {
  const queries = useQueryClient();
  const [body, setBody] = useState("");
  const [caret, setCaret] = useState(0);
  const [active, setActive] = useState(0);
  const [dismissed, setDismissed] = useState(false);
  const box = useRef<HTMLTextAreaElement>(null);
  const listId = useId();
  const mention = dismissed ? null : mentionAt(body, caret);
  const typed = useDebounced(mention?.query ?? null, 150);
  const people = useQuery({
    queryKey: ["mentionable", org, typed],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/mentionable", {
          params: { path: { org }, query: { q: typed || undefined, limit: 8 } },
        }),
      ),
    enabled: typed !== null,
    staleTime: 60_000,
  });
  const options: Person[] = mention && typed !== null ? (people.data?.items ?? []) : [];
  const write = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/proposals/{proposal_id}/comments", {
          params: { path: { org, proposal_id: id } },
          body: { body },
        }),
      ),
    onSuccess: () => {
      setBody("");
      onWritten();
      void queries.invalidateQueries({ queryKey: ["comments", org, id] });
    },
  });
  const choose = (person: Person) => {
    if (!mention) return;
    const inserted = `@${person.email} `;
    const next = body.slice(0, mention.start) + inserted + body.slice(caret);
    const at = mention.start + inserted.length;
    setBody(next);
    setCaret(at);
    setActive(0);
    requestAnimationFrame(() => {
      box.current?.focus();
      box.current?.setSelectionRange(at, at);
    });
  };
  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    if (options.length === 0) return;
    if (e.key === "ArrowDown") {
      e.preventDefault();
      setActive((a) => (a + 1) % options.length);
    } else if (e.key === "ArrowUp") {
      e.preventDefault();
      setActive((a) => (a - 1 + options.length) % options.length);
    } else if (e.key === "Enter" || e.key === "Tab") {
      const person = options[Math.min(active, options.length - 1)];
      if (person) {
        e.preventDefault();
        choose(person);
      }
    } else if (e.key === "Escape") {
      setDismissed(true);
    }
  };
  const expanded = options.length > 0;
  return (
    <form
      className="comment-box"
      onSubmit={(e) => {
        e.preventDefault();
        write.mutate();
      }}
    >
      <label htmlFor={`${listId}-text`}>Comment</label>
      <div className="combo">
        <textarea
          id={`${listId}-text`}
          ref={box}
          rows={3}
          value={body}
          required
          maxLength={10000}
          role="combobox"
          aria-autocomplete="list"
          aria-expanded={expanded}
          aria-controls={`${listId}-list`}
          aria-activedescendant={expanded ? `${listId}-opt-${active}` : undefined}
          placeholder="Write a comment; @ mentions a member"
          onChange={(e) => {
            setBody(e.target.value);
            setCaret(e.target.selectionStart);
            setDismissed(false);
            setActive(0);
          }}
          onSelect={(e) => setCaret(e.currentTarget.selectionStart)}
          onKeyDown={onKeyDown}
        />
        <ul id={`${listId}-list`} role="listbox" className="suggestions" aria-label="Members" hidden={!expanded}>
          {options.map((p, i) => (
            <li
              key={p.id}
              id={`${listId}-opt-${i}`}
              role="option"
              aria-selected={i === active}
              onMouseDown={(e) => {
                e.preventDefault();
                choose(p);
              }}
            >
              {p.name ? (
                <>
                  {p.name} <span className="muted">{p.email}</span>
                </>
              ) : (
                p.email
              )}
            </li>
          ))}
        </ul>
      </div>
      <ErrorNote error={write.error} />
      <button type="submit" className="primary" disabled={write.isPending || !body.trim()}>
        Comment
      </button>
    </form>
  );
}
