// One proposal: what approving would do to its hosts (decisions §21: warnings, reboots,
// restarts, installs and removals, shown before the approve button); its changes grouped by
// package with both versions, advisories and changelog entries; its targets and preflight;
// approval progress (who approved, how many more); the decisions (approve, reject with a reason,
// snooze until) for those who may decide; once it has gone ahead, its rollout wave by wave with
// halt and resume for operators (decisions §20); and the discussion, which a viewer does not
// see (decisions §4).
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "wouter";
import { api, unwrap, type Schemas } from "../api/client";
import { useRights } from "../api/session";
import { Badge, ErrorNote, Field, Kev, Loaded, PageTitle, Status, When } from "../ui/kit";
import { Comments } from "./Comments";
import { ImpactBadges, ImpactPanel } from "./Impact";

type Detail = Schemas["ProposalDetail"];

export function ProposalDetailPage({ org, id }: { org: string; id: string }) {
  const rights = useRights(org);
  const proposal = useQuery({
    queryKey: ["proposal", org, id],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/proposals/{proposal_id}", { params: { path: { org, proposal_id: id } } })),
  });
  return (
    <Loaded query={proposal}>
      {(p) => (
        <>
          <PageTitle>{`#${p.number} ${p.title}`}</PageTitle>
          <p className="crumbs">
            <Link href={`/orgs/${org}/proposals`}>Proposals</Link> / #{p.number} <Status value={p.status} />{" "}
            <Status value={p.max_severity ?? "unrated"} /> {p.known_exploited && <Kev />}
          </p>
          {p.rollout && <Rollout org={org} proposal={p} rollout={p.rollout} operate={rights.operate} />}
          <ImpactPanel org={org} proposal={p} />
          <div className="grid2">
            <Progress proposal={p} />
            {rights.operate ? <Decide org={org} proposal={p} /> : <Summary proposal={p} />}
          </div>
          {p.preflight.length > 0 && (
            <section className="panel warn" aria-labelledby="preflight">
              <h2 id="preflight">Preflight</h2>
              <p>Approving now would be refused:</p>
              <ul>
                {p.preflight.map((line) => (
                  <li key={line}>{line}</li>
                ))}
              </ul>
            </section>
          )}
          <Changes proposal={p} />
          <Targets org={org} proposal={p} />
          {rights.discuss && <Comments org={org} id={id} />}
        </>
      )}
    </Loaded>
  );
}

function Summary({ proposal: p }: { proposal: Detail }) {
  return (
    <section className="panel">
      <h2>About</h2>
      <dl className="facts">
        <div>
          <dt>Kind</dt>
          <dd>{p.kind.replace(/_/g, " ")}</dd>
        </div>
        <div>
          <dt>Policy</dt>
          <dd>{p.policy ? `${p.policy.name} (version ${p.policy.version})` : "—"}</dd>
        </div>
        <div>
          <dt>Reboots</dt>
          <dd>{p.reboot.replace(/_/g, " ")}</dd>
        </div>
        <div>
          <dt>Opened</dt>
          <dd>
            <When at={p.created_at} />
          </dd>
        </div>
      </dl>
    </section>
  );
}

function Progress({ proposal: p }: { proposal: Detail }) {
  return (
    <section className="panel" aria-labelledby="progress">
      <h2 id="progress">Approval</h2>
      <p className="progress-line">
        <strong data-testid="approvals">
          {p.approvals} of {p.required}
        </strong>{" "}
        approval{p.required === 1 ? "" : "s"}
        {p.outstanding > 0 ? `: ${p.outstanding} more needed` : ""}
      </p>
      <progress max={Math.max(p.required, 1)} value={Math.min(p.approvals, Math.max(p.required, 1))} aria-label="Approvals" />
      {p.scheduled_for && (
        <p>
          Scheduled for <When at={p.scheduled_for} />
        </p>
      )}
      {p.snoozed_until && (
        <p>
          Snoozed until <When at={p.snoozed_until} />
        </p>
      )}
      {p.decisions.length > 0 && (
        <ol className="decisions">
          {p.decisions.map((d, i) => (
            <li key={i}>
              <strong>{d.by.name ?? d.by.email}</strong> {d.decision} <When at={d.at} />
              {d.reason && <q>{d.reason}</q>}
            </li>
          ))}
        </ol>
      )}
      {p.decisions.length === 0 && <p className="muted">Nobody has decided yet.</p>}
    </section>
  );
}

function Decide({ org, proposal: p }: { org: string; proposal: Detail }) {
  const queries = useQueryClient();
  const [mode, setMode] = useState<"none" | "reject" | "snooze">("none");
  const [reason, setReason] = useState("");
  const [until, setUntil] = useState("");
  const path = { org, proposal_id: p.id };
  const done = () => {
    void queries.invalidateQueries({ queryKey: ["proposal", org, p.id] });
    void queries.invalidateQueries({ queryKey: ["proposals", org] });
    setMode("none");
    setReason("");
  };
  const approve = useMutation({
    mutationFn: async () =>
      unwrap(await api.POST("/v1/orgs/{org}/proposals/{proposal_id}/approve", { params: { path } })),
    onSuccess: done,
  });
  const reject = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/proposals/{proposal_id}/reject", { params: { path }, body: { reason: reason.trim() } }),
      ),
    onSuccess: done,
  });
  const snooze = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/proposals/{proposal_id}/snooze", {
          params: { path },
          body: { until: new Date(until).toISOString(), reason: reason.trim() || null },
        }),
      ),
    onSuccess: done,
  });
  const decidable = p.status === "open" || p.status === "snoozed";
  const error = approve.error ?? reject.error ?? snooze.error;
  return (
    <section className="panel" aria-labelledby="decide">
      <h2 id="decide">Decide</h2>
      {!decidable ? (
        <p className="muted">This proposal is {p.status.replace(/_/g, " ")}: there is nothing left to decide.</p>
      ) : (
        <>
          <div className="buttons">
            <button type="button" className="primary" onClick={() => approve.mutate()} disabled={approve.isPending}>
              Approve
            </button>
            <button type="button" onClick={() => setMode(mode === "reject" ? "none" : "reject")} aria-expanded={mode === "reject"}>
              Reject…
            </button>
            <button type="button" onClick={() => setMode(mode === "snooze" ? "none" : "snooze")} aria-expanded={mode === "snooze"}>
              Snooze…
            </button>
          </div>
          {mode === "reject" && (
            <form
              onSubmit={(e) => {
                e.preventDefault();
                reject.mutate();
              }}
            >
              <Field label="Reason for rejecting">
                {(id) => <textarea id={id} required rows={3} value={reason} onChange={(e) => setReason(e.target.value)} />}
              </Field>
              <button type="submit" className="danger" disabled={reject.isPending}>
                Reject proposal
              </button>
            </form>
          )}
          {mode === "snooze" && (
            <form
              onSubmit={(e) => {
                e.preventDefault();
                snooze.mutate();
              }}
            >
              <Field label="Snooze until">
                {(id) => <input id={id} type="datetime-local" required value={until} onChange={(e) => setUntil(e.target.value)} />}
              </Field>
              <Field label="Reason (optional)">
                {(id) => <input id={id} value={reason} onChange={(e) => setReason(e.target.value)} />}
              </Field>
              <button type="submit" disabled={snooze.isPending}>
                Snooze proposal
              </button>
            </form>
          )}
        </>
      )}
      <ErrorNote error={error} />
      <p className="muted small">
        Approving lets the job {p.reboot === "never" ? "never reboot" : p.reboot === "immediate" ? "reboot hosts that need it" : "reboot hosts that need it, inside the window"}.
      </p>
    </section>
  );
}

const ROLLOUT_STATE: Record<string, string> = {
  waiting: "waiting for the window",
  running: "running",
  soaking: "soaking",
  halted: "halted",
  done: "done",
};

function Rollout({
  org,
  proposal: p,
  rollout: r,
  operate,
}: {
  org: string;
  proposal: Detail;
  rollout: Schemas["ProposalRollout"];
  operate: boolean;
}) {
  const queries = useQueryClient();
  const [halting, setHalting] = useState(false);
  const [reason, setReason] = useState("");
  const path = { org, proposal_id: p.id };
  const done = () => {
    void queries.invalidateQueries({ queryKey: ["proposal", org, p.id] });
    setHalting(false);
    setReason("");
  };
  const halt = useMutation({
    mutationFn: async () =>
      unwrap(await api.POST("/v1/orgs/{org}/proposals/{proposal_id}/halt", { params: { path }, body: { reason: reason.trim() } })),
    onSuccess: done,
  });
  const resume = useMutation({
    mutationFn: async () => unwrap(await api.POST("/v1/orgs/{org}/proposals/{proposal_id}/resume", { params: { path } })),
    onSuccess: done,
  });
  const halted = r.state === "halted";
  const current = r.waves[r.wave];
  return (
    <section className={`panel ${halted ? "warn" : ""}`} aria-labelledby="rollout">
      <h2 id="rollout">Rollout</h2>
      <p data-testid="rollout-state">
        <Badge tone={halted ? "bad" : r.state === "done" ? "good" : "info"}>{ROLLOUT_STATE[r.state] ?? r.state}</Badge>{" "}
        {r.state !== "done" && current && (
          <>
            wave {r.wave + 1} of {r.waves.length}, <strong>{current.name}</strong>
          </>
        )}
        {r.waiting_until && (
          <>
            {" "}
            until <When at={r.waiting_until} />
          </>
        )}
      </p>
      {halted && r.halted_reason && (
        <p>
          Halted{r.halted_at && (
            <>
              {" "}
              <When at={r.halted_at} />
            </>
          )}
          : <q data-testid="halted-reason">{r.halted_reason}</q> Jobs already handed out finish; no new ones until it is resumed.
        </p>
      )}
      <div className="table-wrap">
        <table className="waves">
          <thead>
            <tr>
              <th scope="col">Wave</th>
              <th scope="col">Hosts</th>
              <th scope="col">Pending</th>
              <th scope="col">Running</th>
              <th scope="col">Succeeded</th>
              <th scope="col">Failed</th>
              <th scope="col">Left</th>
              <th scope="col">Progress</th>
            </tr>
          </thead>
          <tbody>
            {r.waves.map((w, i) => (
              <tr key={`${i}-${w.name}`} aria-current={i === r.wave && r.state !== "done" ? "step" : undefined}>
                <th scope="row">{w.name}</th>
                <td>{w.hosts}</td>
                <td>{w.pending}</td>
                <td>{w.running}</td>
                <td>{w.succeeded}</td>
                <td className={w.failed > 0 ? "bad" : undefined}>{w.failed}</td>
                <td>{w.left}</td>
                <td>
                  <progress
                    max={Math.max(w.hosts, 1)}
                    value={w.succeeded + w.failed + w.left}
                    aria-label={`Wave ${w.name}: ${w.succeeded + w.failed + w.left} of ${w.hosts} done`}
                  />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {operate && (
        <>
          <div className="buttons">
            {halted ? (
              <button type="button" className="primary" onClick={() => resume.mutate()} disabled={resume.isPending}>
                Resume rollout
              </button>
            ) : (
              r.state !== "done" && (
                <button type="button" className="danger" onClick={() => setHalting(!halting)} aria-expanded={halting}>
                  Halt rollout…
                </button>
              )
            )}
          </div>
          {halting && !halted && (
            <form
              onSubmit={(e) => {
                e.preventDefault();
                halt.mutate();
              }}
            >
              <Field label="Reason for halting">
                {(id) => <textarea id={id} required rows={2} value={reason} onChange={(e) => setReason(e.target.value)} />}
              </Field>
              <button type="submit" className="danger" disabled={halt.isPending}>
                Halt: no new jobs
              </button>
            </form>
          )}
          <ErrorNote error={halt.error ?? resume.error} />
        </>
      )}
    </section>
  );
}

function Changes({ proposal: p }: { proposal: Detail }) {
  return (
    <section className="panel" aria-labelledby="changes">
      <h2 id="changes">
        Changes <span className="muted">({p.packages} package{p.packages === 1 ? "" : "s"})</span>
      </h2>
      {p.release_upgrade && (
        <p>
          Release upgrade of {p.release_upgrade.distro} from {p.release_upgrade.from.codename} ({p.release_upgrade.from.version}) to{" "}
          {p.release_upgrade.to.codename} ({p.release_upgrade.to.version}).
        </p>
      )}
      <div className="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Package</th>
              <th scope="col">From</th>
              <th scope="col">To</th>
              <th scope="col">Hosts</th>
              <th scope="col">Advisories</th>
            </tr>
          </thead>
          <tbody>
            {p.changes.map((c) => (
              <tr key={`${c.package}/${c.from_version}/${c.to_version}`}>
                <td>
                  {c.package} <span className="muted small">{c.ecosystem}</span>
                  {c.changelog && <Changelog changelog={c.changelog} />}
                </td>
                <td>
                  <code>{c.from_version}</code>
                </td>
                <td>
                  <code>{c.to_version}</code>
                </td>
                <td>{c.hosts}</td>
                <td>
                  <ul className="plain">
                    {c.advisories.map((a) => (
                      <li key={a.id}>
                        {a.url ? (
                          <a href={a.url} target="_blank" rel="noreferrer noopener">
                            {a.external_id}
                          </a>
                        ) : (
                          a.external_id
                        )}{" "}
                        <Status value={a.severity} /> {a.known_exploited && <Kev />}
                        {a.title && <div className="small">{a.title}</div>}
                        {a.cves.length > 0 && <div className="muted small">{a.cves.join(", ")}</div>}
                      </li>
                    ))}
                  </ul>
                  {c.advisories.length === 0 && <span className="muted">—</span>}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function Changelog({ changelog }: { changelog: NonNullable<Schemas["ChangeView"]["changelog"]> }) {
  if (changelog.entries.length === 0) {
    return <div className="muted small">changelog {changelog.status}</div>;
  }
  return (
    <details className="changelog">
      <summary>
        Changelog ({changelog.entries.length} entr{changelog.entries.length === 1 ? "y" : "ies"})
      </summary>
      {changelog.entries.map((e) => (
        <article key={e.version}>
          <h4>
            {e.version} {e.urgency && <span className="muted small">urgency {e.urgency}</span>}
          </h4>
          <pre>{e.changes}</pre>
          <p className="muted small">
            {e.maintainer} {e.date && <When at={e.date} />}
          </p>
        </article>
      ))}
      {changelog.url && (
        <a href={changelog.url} target="_blank" rel="noreferrer noopener" className="small">
          The whole changelog
        </a>
      )}
    </details>
  );
}

function Targets({ org, proposal: p }: { org: string; proposal: Detail }) {
  return (
    <section className="panel" aria-labelledby="targets">
      <h2 id="targets">
        Hosts <span className="muted">({p.hosts})</span>
      </h2>
      <ul className="targets">
        {p.targets.map((t) => (
          <li key={t.id}>
            <Link href={`/orgs/${org}/hosts/${t.id}`}>{t.display_name ?? t.hostname}</Link> <ImpactBadges impact={t.impact} />
            {p.rollout && t.wave !== null && t.wave !== undefined && (
              <span className="muted small"> · {p.rollout.waves[t.wave]?.name ?? `wave ${t.wave + 1}`}</span>
            )}
          </li>
        ))}
      </ul>
      {!p.targets_complete && (
        <p className="muted">
          The first {p.targets.length} of {p.hosts} are listed.{" "}
          <Link href={`/orgs/${org}/hosts`}>All hosts</Link>
        </p>
      )}
    </section>
  );
}
