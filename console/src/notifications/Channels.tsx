// Notification channels (per kind, the webhook secret shown once, a test send, the delivery
// log with every attempt) and the member's own digest setting.
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useLocation } from "wouter";
import { api, unwrap, type Schemas } from "../api/client";
import { useRights } from "../api/session";
import { ConfirmButton, Empty, ErrorNote, Field, Loaded, PageTitle, Pager, Secret, Status, When, useCursorPages } from "../ui/kit";

type Kind = Schemas["NotificationChannelKind"];
type EventType = Schemas["NotificationEventType"];

const KINDS: { kind: Kind; label: string; fields: { key: string; label: string; list?: boolean; optional?: boolean }[] }[] = [
  { kind: "email", label: "Email", fields: [{ key: "to", label: "Addresses (comma separated)", list: true }] },
  { kind: "webhook", label: "Webhook", fields: [{ key: "url", label: "URL (https)" }] },
  { kind: "slack", label: "Slack", fields: [{ key: "webhook_url", label: "Incoming webhook URL" }] },
  { kind: "teams", label: "Microsoft Teams", fields: [{ key: "webhook_url", label: "Incoming webhook URL" }] },
  {
    kind: "ntfy",
    label: "ntfy",
    fields: [
      { key: "topic_url", label: "Topic URL" },
      { key: "token", label: "Access token (optional)", optional: true },
    ],
  },
  { kind: "pagerduty", label: "PagerDuty", fields: [{ key: "routing_key", label: "Routing key" }] },
];

const EVENTS: EventType[] = [
  "proposal.opened",
  "proposal.approved",
  "proposal.scheduled",
  "proposal.applied",
  "proposal.failed",
  "host.enrolled",
  "host.offline",
  "advisory.known_exploited",
];

export function NotificationsPage({ org }: { org: string }) {
  const rights = useRights(org);
  return (
    <>
      <PageTitle>Notifications</PageTitle>
      <Digest org={org} />
      {rights.manage ? (
        <Channels org={org} />
      ) : (
        <p className="muted">Channels are managed by admins.</p>
      )}
    </>
  );
}

function Digest({ org }: { org: string }) {
  const queries = useQueryClient();
  const digest = useQuery({
    queryKey: ["digest", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/digest", { params: { path: { org } } })),
  });
  const save = useMutation({
    mutationFn: async (setting: Schemas["DigestSettingInput"]) =>
      unwrap(await api.PUT("/v1/orgs/{org}/digest", { params: { path: { org } }, body: setting })),
    onSuccess: (saved) => queries.setQueryData(["digest", org], saved),
  });
  return (
    <section className="panel">
      <h2>Your email from this organization</h2>
      <Loaded query={digest}>
        {(d) => (
          <div className="stack">
            <Field label="Digest" hint="Sent at 08:00 in your time zone; weekly on Mondays.">
              {(id) => (
                <select
                  id={id}
                  value={d.frequency}
                  onChange={(e) => save.mutate({ frequency: e.target.value as typeof d.frequency, mention_email: d.mention_email })}
                >
                  <option value="off">off</option>
                  <option value="daily">daily</option>
                  <option value="weekly">weekly</option>
                </select>
              )}
            </Field>
            <label className="check">
              <input
                type="checkbox"
                checked={d.mention_email}
                onChange={(e) => save.mutate({ frequency: d.frequency, mention_email: e.target.checked })}
              />
              Email me when somebody mentions me in a comment
            </label>
            <ErrorNote error={save.error} />
          </div>
        )}
      </Loaded>
    </section>
  );
}

function Channels({ org }: { org: string }) {
  const channels = useQuery({
    queryKey: ["channels", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/notification-channels", { params: { path: { org } } })),
  });
  return (
    <>
      <h2>Channels</h2>
      <NewChannel org={org} />
      <Loaded query={channels}>
        {(list) =>
          list.length === 0 ? (
            <Empty>No channel yet.</Empty>
          ) : (
            <div className="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Kind</th>
                    <th scope="col">Sends to</th>
                    <th scope="col">Events</th>
                  </tr>
                </thead>
                <tbody>
                  {list.map((c) => (
                    <tr key={c.id}>
                      <td>
                        <Link href={`/orgs/${org}/notifications/${c.id}`}>{c.name}</Link>
                      </td>
                      <td>{c.kind}</td>
                      <td>{c.display}</td>
                      <td>{c.events ? c.events.join(", ") : "all"}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )
        }
      </Loaded>
    </>
  );
}

function NewChannel({ org }: { org: string }) {
  const queries = useQueryClient();
  const [kind, setKind] = useState<Kind>("email");
  const [name, setName] = useState("");
  const [values, setValues] = useState<Record<string, string>>({});
  const [events, setEvents] = useState<EventType[] | null>(null);
  const spec = KINDS.find((k) => k.kind === kind)!;
  const create = useMutation({
    mutationFn: async () => {
      const config: Record<string, unknown> = {};
      for (const f of spec.fields) {
        const value = (values[f.key] ?? "").trim();
        if (!value && f.optional) continue;
        config[f.key] = f.list
          ? value
              .split(/[,\s]+/)
              .map((v) => v.trim())
              .filter(Boolean)
          : value;
      }
      return unwrap(
        await api.POST("/v1/orgs/{org}/notification-channels", {
          params: { path: { org } },
          body: { kind, name: name.trim(), config, events },
        }),
      );
    },
    onSuccess: () => queries.invalidateQueries({ queryKey: ["channels", org] }),
  });
  const secret = create.data?.signing_secret;
  return (
    <details className="panel" open={Boolean(secret)}>
      <summary>New channel</summary>
      {create.isSuccess ? (
        <div className="stack">
          <p role="status">Channel “{create.data.name}” made.</p>
          {secret && <Secret label="Signing secret (verify webhooks with it)" value={secret} />}
          <button
            type="button"
            onClick={() => {
              create.reset();
              setName("");
              setValues({});
            }}
          >
            Done
          </button>
        </div>
      ) : (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            create.mutate();
          }}
        >
          <Field label="Kind">
            {(id) => (
              <select id={id} value={kind} onChange={(e) => setKind(e.target.value as Kind)}>
                {KINDS.map((k) => (
                  <option key={k.kind} value={k.kind}>
                    {k.label}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Name">{(id) => <input id={id} required value={name} onChange={(e) => setName(e.target.value)} />}</Field>
          {spec.fields.map((f) => (
            <Field key={`${kind}-${f.key}`} label={f.label}>
              {(id) => (
                <input
                  id={id}
                  required={!f.optional}
                  value={values[f.key] ?? ""}
                  onChange={(e) => setValues((v) => ({ ...v, [f.key]: e.target.value }))}
                />
              )}
            </Field>
          ))}
          <fieldset>
            <legend>Events</legend>
            <label className="check">
              <input type="checkbox" checked={events === null} onChange={(e) => setEvents(e.target.checked ? null : [])} />
              Every event
            </label>
            {events !== null &&
              EVENTS.map((ev) => (
                <label key={ev} className="check">
                  <input
                    type="checkbox"
                    checked={events.includes(ev)}
                    onChange={(e) => setEvents((list) => (e.target.checked ? [...(list ?? []), ev] : (list ?? []).filter((x) => x !== ev)))}
                  />
                  {ev}
                </label>
              ))}
          </fieldset>
          <ErrorNote error={create.error} />
          <button type="submit" className="primary" disabled={create.isPending}>
            Create channel
          </button>
        </form>
      )}
    </details>
  );
}

export function ChannelDetailPage({ org, id }: { org: string; id: string }) {
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const pages = useCursorPages();
  const channels = useQuery({
    queryKey: ["channels", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/notification-channels", { params: { path: { org } } })),
  });
  const channel = channels.data?.find((c) => c.id === id);
  const deliveries = useQuery({
    queryKey: ["deliveries", org, id, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/notification-channels/{channel_id}/deliveries", {
          params: { path: { org, channel_id: id }, query: { cursor: pages.cursor } },
        }),
      ),
    placeholderData: keepPreviousData,
    refetchInterval: 5_000,
  });
  const test = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/notification-channels/{channel_id}/test", { params: { path: { org, channel_id: id } } }),
      ),
    onSuccess: () => setTimeout(() => void queries.invalidateQueries({ queryKey: ["deliveries", org, id] }), 500),
  });
  const remove = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.DELETE("/v1/orgs/{org}/notification-channels/{channel_id}", { params: { path: { org, channel_id: id } } }),
      ),
    onSuccess: () => {
      void queries.invalidateQueries({ queryKey: ["channels", org] });
      navigate(`/orgs/${org}/notifications`);
    },
  });
  return (
    <>
      <PageTitle
        actions={
          <>
            <button type="button" onClick={() => test.mutate()} disabled={test.isPending}>
              Send a test
            </button>
            <ConfirmButton label="Delete" confirm="Delete this channel" onConfirm={() => remove.mutate()} disabled={remove.isPending} />
          </>
        }
      >
        {channel ? channel.name : "Channel"}
      </PageTitle>
      <p className="crumbs">
        <Link href={`/orgs/${org}/notifications`}>Notifications</Link> / {channel?.kind} {channel?.display}
      </p>
      {test.isSuccess && <p role="status">Test queued.</p>}
      <ErrorNote error={test.error ?? remove.error ?? channels.error} />
      <h2>Deliveries</h2>
      <Loaded query={deliveries}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>Nothing delivered yet.</Empty>
          ) : (
            <>
              <ol className="deliveries">
                {page.items.map((d) => (
                  <li key={d.id} className="panel">
                    <p>
                      <strong>{d.event}</strong> <Status value={d.status} /> <When at={d.created_at} />
                      {d.reason && <span className="muted"> · {d.reason}</span>}
                      {d.next_attempt_at && (
                        <span className="muted">
                          {" "}
                          · next attempt <When at={d.next_attempt_at} />
                        </span>
                      )}
                    </p>
                    <ol className="attempts">
                      {d.attempts.map((a) => (
                        <li key={a.number}>
                          Attempt {a.number}: <When at={a.at} /> · {a.status_code != null ? `HTTP ${a.status_code}` : (a.error ?? "no answer")} ·{" "}
                          {a.duration_ms} ms
                        </li>
                      ))}
                    </ol>
                  </li>
                ))}
              </ol>
              <Pager pages={pages} nextCursor={page.next_cursor} />
            </>
          )
        }
      </Loaded>
    </>
  );
}
