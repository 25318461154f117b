// One host: its facts, pending updates (with advisories and known-exploited flags), installed
// packages, events; labels, display name and notes editable by operators; decommission.
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "wouter";
import { api, unwrap, type Schemas } from "../api/client";
import { useRights } from "../api/session";
import {
  Empty,
  ErrorNote,
  Field,
  Kev,
  Labels,
  Loaded,
  PageTitle,
  Pager,
  Status,
  When,
  formatLabels,
  parseLabels,
  useCursorPages,
  useDebounced,
} from "../ui/kit";

type Host = Schemas["Host"];

export function HostDetailPage({ org, id }: { org: string; id: string }) {
  const host = useQuery({
    queryKey: ["host", org, id],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/hosts/{host_id}", { params: { path: { org, host_id: id } } })),
  });
  const [tab, setTab] = useState<"updates" | "packages" | "events">("updates");
  return (
    <Loaded query={host}>
      {(h) => (
        <>
          <PageTitle actions={<Decommission org={org} host={h} />}>{h.display_name ?? h.hostname}</PageTitle>
          <p className="crumbs">
            <Link href={`/orgs/${org}/hosts`}>Hosts</Link> / {h.hostname} <Status value={h.status} />
          </p>
          <div className="grid2">
            <Facts org={org} host={h} />
            <EditHost org={org} host={h} />
          </div>
          <div role="tablist" aria-label="Host details" className="tabs">
            {(["updates", "packages", "events"] as const).map((t) => (
              <button
                key={t}
                type="button"
                role="tab"
                id={`tab-${t}`}
                aria-selected={tab === t}
                aria-controls={`panel-${t}`}
                onClick={() => setTab(t)}
              >
                {t === "updates" ? `Updates${h.updates ? ` (${h.updates.total})` : ""}` : t[0]!.toUpperCase() + t.slice(1)}
              </button>
            ))}
          </div>
          <section role="tabpanel" id={`panel-${tab}`} aria-labelledby={`tab-${tab}`}>
            {tab === "updates" && <Updates org={org} id={id} />}
            {tab === "packages" && <Packages org={org} id={id} />}
            {tab === "events" && <Events org={org} id={id} />}
          </section>
        </>
      )}
    </Loaded>
  );
}

function Facts({ org, host: h }: { org: string; host: Host }) {
  const rows: [string, React.ReactNode][] = [
    ["Hostname", h.hostname],
    ["Machine id", <code key="m">{h.machine_id}</code>],
    ["System", [h.distro, h.distro_version, h.arch].filter(Boolean).join(" ") || "—"],
    ["Kernel", h.kernel_version ?? "—"],
    ["Virtualization", h.virtualization ?? "—"],
    ["Agent", `${h.agent_version ?? "—"}${h.agent_update_available ? " (update available)" : ""}`],
    ["Agent permissions", h.agent_permissions.join(", ") || "—"],
    ["Advisory coverage", h.advisory_coverage.replace(/_/g, " ")],
    ["Reboot required", h.reboot_required === null ? "cannot say" : h.reboot_required ? "yes" : "no"],
    ["Services to restart", h.services_need_restart.join(", ") || "none"],
    ["Held packages", h.held_packages.join(", ") || "none"],
    ["Enrolled", <When key="e" at={h.enrolled_at} />],
    ["Last seen", <When key="s" at={h.last_seen_at} />],
    ["Last inventory", <When key="i" at={h.last_inventory_at} />],
    ["Certificate expires", <When key="c" at={h.cert_expires_at} />],
    ["Groups", h.groups.map((g) => g.name).join(", ") || "none"],
  ];
  return (
    <section className="panel">
      <h2>Facts</h2>
      <dl className="facts">
        {rows.map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </div>
        ))}
      </dl>
      {h.proposals.length > 0 && (
        <>
          <h3>Open proposals</h3>
          <ul>
            {h.proposals.map((p) => (
              <li key={p.id}>
                <Link href={`/orgs/${org}/proposals/${p.id}`}>
                  #{p.number} {p.title}
                </Link>{" "}
                <Status value={p.status} />
              </li>
            ))}
          </ul>
        </>
      )}
    </section>
  );
}

function EditHost({ org, host }: { org: string; host: Host }) {
  const rights = useRights(org);
  const queries = useQueryClient();
  const [displayName, setDisplayName] = useState(host.display_name ?? "");
  const [notes, setNotes] = useState(host.notes ?? "");
  const [labels, setLabels] = useState(formatLabels(host.labels));
  const [labelError, setLabelError] = useState<string | null>(null);
  const save = useMutation({
    mutationFn: async () => {
      const parsed = parseLabels(labels);
      if (parsed.error) throw new Error(parsed.error);
      return unwrap(
        await api.PATCH("/v1/orgs/{org}/hosts/{host_id}", {
          params: { path: { org, host_id: host.id } },
          body: { display_name: displayName.trim() || null, notes: notes.trim() || null, labels: parsed.labels },
        }),
      );
    },
    onSuccess: (updated) => {
      queries.setQueryData(["host", org, host.id], updated);
      void queries.invalidateQueries({ queryKey: ["hosts", org] });
    },
  });
  if (!rights.operate) {
    return (
      <section className="panel">
        <h2>Labels and notes</h2>
        <Labels labels={host.labels} />
        {host.notes && <p className="notes">{host.notes}</p>}
      </section>
    );
  }
  return (
    <section className="panel">
      <h2>Labels and notes</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          setLabelError(parseLabels(labels).error ?? null);
          save.mutate();
        }}
      >
        <Field label="Display name">
          {(id) => <input id={id} value={displayName} onChange={(e) => setDisplayName(e.target.value)} maxLength={255} />}
        </Field>
        <Field label="Labels" hint="key=value, separated by commas. Replaces the whole set.">
          {(id) => <input id={id} value={labels} onChange={(e) => setLabels(e.target.value)} />}
        </Field>
        <Field label="Notes">
          {(id) => <textarea id={id} rows={4} value={notes} onChange={(e) => setNotes(e.target.value)} maxLength={10000} />}
        </Field>
        {labelError && (
          <p className="error" role="alert">
            {labelError}
          </p>
        )}
        <ErrorNote error={save.error} />
        {save.isSuccess && <p role="status">Saved.</p>}
        <button type="submit" className="primary" disabled={save.isPending}>
          Save
        </button>
      </form>
    </section>
  );
}

function Decommission({ org, host }: { org: string; host: Host }) {
  const rights = useRights(org);
  const queries = useQueryClient();
  const [confirming, setConfirming] = useState(false);
  const run = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/hosts/{host_id}/decommission", {
          params: { path: { org, host_id: host.id } },
        }),
      ),
    onSuccess: (updated) => {
      queries.setQueryData(["host", org, host.id], updated);
      setConfirming(false);
    },
  });
  if (!rights.operate || host.decommissioned_at) return null;
  if (!confirming) {
    return (
      <button type="button" className="danger" onClick={() => setConfirming(true)}>
        Decommission…
      </button>
    );
  }
  return (
    <div className="confirm" role="group" aria-label="Confirm decommission">
      <span>Its certificate stops working at once.</span>
      <button type="button" className="danger" onClick={() => run.mutate()} disabled={run.isPending}>
        Decommission {host.hostname}
      </button>
      <button type="button" onClick={() => setConfirming(false)}>
        Cancel
      </button>
      <ErrorNote error={run.error} />
    </div>
  );
}

function Updates({ org, id }: { org: string; id: string }) {
  const pages = useCursorPages();
  const [security, setSecurity] = useState(false);
  const updates = useQuery({
    queryKey: ["host-updates", org, id, security, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/hosts/{host_id}/updates", {
          params: {
            path: { org, host_id: id },
            query: { security: security || undefined, cursor: pages.cursor, limit: 50 },
          },
        }),
      ),
    placeholderData: keepPreviousData,
  });
  return (
    <>
      <label className="check">
        <input
          type="checkbox"
          checked={security}
          onChange={(e) => {
            setSecurity(e.target.checked);
            pages.reset();
          }}
        />
        Security updates only
      </label>
      <Loaded query={updates}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No pending update reported.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Package</th>
                      <th scope="col">Installed</th>
                      <th scope="col">Offered</th>
                      <th scope="col">Advisories</th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((u) => (
                      <tr key={`${u.name}/${u.arch}`}>
                        <td>
                          {u.name} <span className="muted small">{u.arch}</span>
                          {u.requires_reboot && <span className="muted small"> · reboot</span>}
                        </td>
                        <td>
                          <code>{u.from_version}</code>
                        </td>
                        <td>
                          <code>{u.to_version}</code>
                        </td>
                        <td>
                          {u.advisories.length === 0 ? (
                            <span className="muted">{u.security ? "security" : "—"}</span>
                          ) : (
                            <ul className="plain">
                              {u.advisories.map((a) => (
                                <li key={a.id}>
                                  {a.url ? (
                                    <a href={a.url} rel="noreferrer noopener" target="_blank">
                                      {a.external_id}
                                    </a>
                                  ) : (
                                    a.external_id
                                  )}{" "}
                                  <Status value={a.severity} /> {a.known_exploited && <Kev />}
                                  {a.cves.length > 0 && <span className="muted small"> {a.cves.join(", ")}</span>}
                                </li>
                              ))}
                            </ul>
                          )}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
              <Pager pages={pages} nextCursor={page.next_cursor} />
            </>
          )
        }
      </Loaded>
    </>
  );
}

function Packages({ org, id }: { org: string; id: string }) {
  const pages = useCursorPages();
  const [q, setQ] = useState("");
  const typed = useDebounced(q);
  const packages = useQuery({
    queryKey: ["host-packages", org, id, typed, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/hosts/{host_id}/packages", {
          params: { path: { org, host_id: id }, query: { q: typed || undefined, cursor: pages.cursor, limit: 100 } },
        }),
      ),
    placeholderData: keepPreviousData,
  });
  return (
    <>
      <label>
        Search packages{" "}
        <input
          type="search"
          value={q}
          onChange={(e) => {
            setQ(e.target.value);
            pages.reset();
          }}
        />
      </label>
      <Loaded query={packages}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No package reported.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Package</th>
                      <th scope="col">Version</th>
                      <th scope="col">Architecture</th>
                      <th scope="col">Source</th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((p) => (
                      <tr key={`${p.name}/${p.arch}`}>
                        <td>{p.name}</td>
                        <td>
                          <code>{p.version}</code>
                        </td>
                        <td>{p.arch}</td>
                        <td className="muted">{p.source_name ? `${p.source_name} ${p.source_version ?? ""}` : "—"}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
              <Pager pages={pages} nextCursor={page.next_cursor} />
            </>
          )
        }
      </Loaded>
    </>
  );
}

function Events({ org, id }: { org: string; id: string }) {
  const pages = useCursorPages();
  const events = useQuery({
    queryKey: ["host-events", org, id, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/hosts/{host_id}/events", {
          params: { path: { org, host_id: id }, query: { cursor: pages.cursor } },
        }),
      ),
    placeholderData: keepPreviousData,
  });
  return (
    <Loaded query={events}>
      {(page) =>
        page.items.length === 0 ? (
          <Empty>Nothing has happened yet.</Empty>
        ) : (
          <>
            <ol className="events">
              {page.items.map((e) => (
                <li key={e.id}>
                  <When at={e.at} /> <strong>{e.kind.replace(/_/g, " ")}</strong>
                  {e.details != null && <code className="small"> {JSON.stringify(e.details)}</code>}
                </li>
              ))}
            </ol>
            <Pager pages={pages} nextCursor={page.next_cursor} />
          </>
        )
      }
    </Loaded>
  );
}
