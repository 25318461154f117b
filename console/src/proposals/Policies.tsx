// Policies: which hosts they cover (groups and a label selector, the count live while it is
// written), how many approvals their proposals need, when changes may go out (a maintenance
// window with its next five openings in the window's own time zone), reboot rules, and how
// approved changes go out (a rollout in waves, each wave's size for the hosts covered now).
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useLocation } from "wouter";
import { api, unwrap, type Schemas } from "../api/client";
import { useRights } from "../api/session";
import { ConfirmButton, Empty, ErrorNote, Field, Loaded, PageTitle, Pager, When, useCursorPages, useDebounced } from "../ui/kit";

type Policy = Schemas["Policy"];
type Body = Schemas["PolicyBody"];
type Rollout = Schemas["RolloutBody"];

/** A wave as the form holds it: the size as typed ("2" or "25%"). */
interface WaveRow {
  name: string;
  size: string;
  selector: string;
}

/** "2" as a count, anything else ("25%", or a mistake the service names) as typed. */
function amount(text: string): number | string {
  const t = text.trim();
  return /^\d+$/.test(t) ? Number(t) : t;
}

/** A policy's rollout in a line: "canary 2 → half 50% → rest". */
function rolloutLine(rollout: Schemas["RolloutView"]): string {
  return [...rollout.waves.map((w) => `${w.name} ${w.size}`), "rest"].join(" → ");
}

function WaveSizes({ waves }: { waves: Schemas["WavePreview"][] }) {
  return (
    <table className="waves" aria-label="Wave sizes now">
      <thead>
        <tr>
          <th scope="col">Wave</th>
          <th scope="col">Hosts now</th>
        </tr>
      </thead>
      <tbody>
        {waves.map((w, i) => (
          <tr key={`${i}-${w.name}`}>
            <td>{w.name}</td>
            <td>{w.hosts.toLocaleString()}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Openings({ openings, zone }: { openings: string[]; zone: string }) {
  if (openings.length === 0) return <p className="muted">The window never opens again.</p>;
  return (
    <ol className="openings" aria-label={`Next openings (${zone})`}>
      {openings.map((at) => (
        <li key={at}>
          <When at={at} zone={zone} />
        </li>
      ))}
    </ol>
  );
}

export function PoliciesPage({ org }: { org: string }) {
  const rights = useRights(org);
  const pages = useCursorPages();
  const policies = useQuery({
    queryKey: ["policies", org, pages.cursor],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/policies", { params: { path: { org }, query: { cursor: pages.cursor } } })),
  });
  return (
    <>
      <PageTitle actions={rights.manage && <Link href={`/orgs/${org}/policies/new`} className="button primary">New policy</Link>}>
        Policies
      </PageTitle>
      <Loaded query={policies}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No policy yet: without one, no update is proposed.</Empty>
          ) : (
            <>
              <div className="cards">
                {page.items.map((p) => (
                  <PolicyCard key={p.id} org={org} policy={p} />
                ))}
              </div>
              <Pager pages={pages} nextCursor={page.next_cursor} />
            </>
          )
        }
      </Loaded>
    </>
  );
}

function PolicyCard({ org, policy: p }: { org: string; policy: Policy }) {
  const scope = useQuery({
    queryKey: ["policy-preview", org, p.scope, null],
    queryFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/policies/preview", {
          params: { path: { org } },
          body: { scope: { groups: p.scope.groups, selector: p.scope.selector ?? null }, window: null },
        }),
      ),
  });
  return (
    <article className="panel">
      <h2>
        <Link href={`/orgs/${org}/policies/${p.id}`}>{p.name}</Link> <span className="muted small">version {p.version}</span>
      </h2>
      <dl className="facts">
        <div>
          <dt>Scope</dt>
          <dd>
            {p.scope.groups.length > 0 ? `${p.scope.groups.length} group${p.scope.groups.length === 1 ? "" : "s"}` : "every host"}
            {p.scope.selector && (
              <>
                {" "}
                where <code>{p.scope.selector}</code>
              </>
            )}
            {scope.data && ` · ${scope.data.hosts.toLocaleString()} host${scope.data.hosts === 1 ? "" : "s"} now`}
          </dd>
        </div>
        <div>
          <dt>Approvals</dt>
          <dd>{p.required_approvals === 0 ? "approved automatically" : `${p.required_approvals} people`}</dd>
        </div>
        <div>
          <dt>Updates</dt>
          <dd>
            {p.updates}
            {p.min_severity && `, at least ${p.min_severity}`}
          </dd>
        </div>
        <div>
          <dt>Goes out</dt>
          <dd>{p.apply === "asap" ? "as soon as approved" : "in the window once approved"}</dd>
        </div>
        <div>
          <dt>Reboots</dt>
          <dd>{p.reboot.replace(/_/g, " ")}</dd>
        </div>
        <div>
          <dt>Rollout</dt>
          <dd>{p.rollout ? rolloutLine(p.rollout) : "every host at once"}</dd>
        </div>
      </dl>
      {p.window && (
        <>
          <h3>
            Window: <code>{p.window.rrule}</code> for {p.window.duration_minutes} min ({p.window.time_zone})
          </h3>
          <Openings openings={p.window.openings} zone={p.window.time_zone} />
        </>
      )}
    </article>
  );
}

export function PolicyEditPage({ org, id }: { org: string; id?: string }) {
  const policy = useQuery({
    queryKey: ["policy", org, id],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/policies/{policy_id}", { params: { path: { org, policy_id: id ?? "" } } })),
    enabled: Boolean(id),
  });
  if (id) {
    return <Loaded query={policy}>{(p) => <PolicyForm org={org} existing={p} />}</Loaded>;
  }
  return <PolicyForm org={org} />;
}

function PolicyForm({ org, existing }: { org: string; existing?: Policy }) {
  const rights = useRights(org);
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const [name, setName] = useState(existing?.name ?? "");
  const [groups, setGroups] = useState<string[]>(existing?.scope.groups ?? []);
  const [selector, setSelector] = useState(existing?.scope.selector ?? "");
  const [approvals, setApprovals] = useState(existing?.required_approvals ?? 1);
  const [apply, setApply] = useState<Body["apply"]>(existing?.apply ?? "asap");
  const [reboot, setReboot] = useState<Body["reboot"]>(existing?.reboot ?? "never");
  const [updates, setUpdates] = useState<Body["updates"]>(existing?.updates ?? "all");
  const [minSeverity, setMinSeverity] = useState<string>(existing?.min_severity ?? "");
  const [autoMerge, setAutoMerge] = useState(existing?.auto_merge ?? false);
  const [hasWindow, setHasWindow] = useState(Boolean(existing?.window));
  const [rrule, setRrule] = useState(existing?.window?.rrule ?? "FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0");
  const [duration, setDuration] = useState(existing?.window?.duration_minutes ?? 120);
  const [zone, setZone] = useState(existing?.window?.time_zone ?? Intl.DateTimeFormat().resolvedOptions().timeZone ?? "UTC");
  const [inWaves, setInWaves] = useState(Boolean(existing?.rollout));
  const [waves, setWaves] = useState<WaveRow[]>(
    existing?.rollout?.waves.map((w) => ({ name: w.name, size: String(w.size), selector: w.selector ?? "" })) ?? [
      { name: "canary", size: "1", selector: "" },
    ],
  );
  const [soak, setSoak] = useState(existing?.rollout?.soak_minutes ?? 0);
  const [success, setSuccess] = useState(existing?.rollout?.success_percent ?? 100);
  const [haltAfter, setHaltAfter] = useState(String(existing?.rollout?.halt_after_failures ?? "1"));
  const [maxInFlight, setMaxInFlight] = useState(existing?.rollout?.max_in_flight?.toString() ?? "");
  const setWave = (i: number, change: Partial<WaveRow>) =>
    setWaves((ws) => ws.map((w, j) => (j === i ? { ...w, ...change } : w)));

  const allGroups = useQuery({
    queryKey: ["groups", org, "all"],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/groups", { params: { path: { org }, query: { limit: 500 } } })),
  });

  const windowRule = hasWindow ? { rrule, duration_minutes: duration, time_zone: zone } : null;
  const scope = { groups, selector: selector.trim() || null };
  const rollout: Rollout | null = inWaves
    ? {
        waves: waves.map((w) => ({ name: w.name.trim(), size: amount(w.size), selector: w.selector.trim() || null })),
        soak_minutes: soak,
        success_percent: success,
        halt_after_failures: amount(haltAfter),
        max_in_flight: maxInFlight.trim() ? Number(maxInFlight) : null,
      }
    : null;
  const previewInput = useDebounced({ scope, window: windowRule, rollout }, 400);
  const preview = useQuery({
    queryKey: ["policy-preview", org, previewInput.scope, previewInput.window, previewInput.rollout],
    queryFn: async () =>
      unwrap(await api.POST("/v1/orgs/{org}/policies/preview", { params: { path: { org } }, body: previewInput })),
    placeholderData: keepPreviousData,
    retry: false,
  });

  const body: Body = {
    name: name.trim(),
    scope,
    required_approvals: approvals,
    apply,
    reboot,
    updates,
    auto_merge: autoMerge,
    min_severity: (minSeverity || null) as Body["min_severity"],
    window: windowRule,
    rollout,
  };
  const save = useMutation({
    mutationFn: async () =>
      existing
        ? unwrap(
            await api.PUT("/v1/orgs/{org}/policies/{policy_id}", {
              params: { path: { org, policy_id: existing.id } },
              body,
            }),
          )
        : unwrap(await api.POST("/v1/orgs/{org}/policies", { params: { path: { org } }, body })),
    onSuccess: (saved) => {
      void queries.invalidateQueries({ queryKey: ["policies", org] });
      queries.setQueryData(["policy", org, saved.id], saved);
      navigate(`/orgs/${org}/policies/${saved.id}`, { replace: true });
    },
  });
  const remove = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.DELETE("/v1/orgs/{org}/policies/{policy_id}", { params: { path: { org, policy_id: existing?.id ?? "" } } }),
      ),
    onSuccess: () => {
      void queries.invalidateQueries({ queryKey: ["policies", org] });
      navigate(`/orgs/${org}/policies`);
    },
  });
  const readOnly = !rights.manage;
  return (
    <>
      <PageTitle>{existing ? existing.name : "New policy"}</PageTitle>
      <p className="crumbs">
        <Link href={`/orgs/${org}/policies`}>Policies</Link> / {existing ? `version ${existing.version}` : "new"}
      </p>
      <form
        className="grid2"
        onSubmit={(e) => {
          e.preventDefault();
          save.mutate();
        }}
      >
        <fieldset className="panel" disabled={readOnly}>
          <legend>Policy</legend>
          <Field label="Name">{(id) => <input id={id} required value={name} onChange={(e) => setName(e.target.value)} />}</Field>
          <fieldset>
            <legend>Scope</legend>
            <p className="hint">Hosts in any of the chosen groups (every host when none is chosen) that match the selector.</p>
            {allGroups.data?.items.map((g) => (
              <label key={g.id} className="check">
                <input
                  type="checkbox"
                  checked={groups.includes(g.id)}
                  onChange={(e) => setGroups((gs) => (e.target.checked ? [...gs, g.id] : gs.filter((x) => x !== g.id)))}
                />
                {g.name}
              </label>
            ))}
            <Field label="Label selector (optional)">
              {(id) => <input id={id} value={selector} placeholder="env=prod" onChange={(e) => setSelector(e.target.value)} />}
            </Field>
          </fieldset>
          <Field label="Approvals needed" hint="Distinct people; 0 approves automatically.">
            {(id) => (
              <input id={id} type="number" min={0} max={20} value={approvals} onChange={(e) => setApprovals(Number(e.target.value))} />
            )}
          </Field>
          <Field label="Updates">
            {(id) => (
              <select id={id} value={updates} onChange={(e) => setUpdates(e.target.value as Body["updates"])}>
                <option value="all">all</option>
                <option value="security">security only</option>
              </select>
            )}
          </Field>
          <Field label="At least this severe (optional)">
            {(id) => (
              <select id={id} value={minSeverity} onChange={(e) => setMinSeverity(e.target.value)}>
                <option value="">any, unrated included</option>
                {["low", "medium", "high", "critical"].map((s) => (
                  <option key={s} value={s}>
                    {s}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Goes out">
            {(id) => (
              <select id={id} value={apply} onChange={(e) => setApply(e.target.value as Body["apply"])}>
                <option value="asap">as soon as approved</option>
                <option value="asap_in_window">in the window, once approved</option>
              </select>
            )}
          </Field>
          <Field label="Reboots">
            {(id) => (
              <select id={id} value={reboot} onChange={(e) => setReboot(e.target.value as Body["reboot"])}>
                <option value="never">never</option>
                <option value="immediate">right after, where needed</option>
                <option value="in_window">in the window, where needed</option>
              </select>
            )}
          </Field>
          <label className="check">
            <input type="checkbox" checked={autoMerge} onChange={(e) => setAutoMerge(e.target.checked)} />
            Fold new updates into the open proposal
          </label>
        </fieldset>
        <fieldset className="panel" disabled={readOnly}>
          <legend>Maintenance window</legend>
          <label className="check">
            <input type="checkbox" checked={hasWindow} onChange={(e) => setHasWindow(e.target.checked)} />
            This policy has a maintenance window
          </label>
          {hasWindow && (
            <>
              <Field label="Recurrence (RFC 5545 RRULE)">
                {(id) => <input id={id} value={rrule} onChange={(e) => setRrule(e.target.value)} />}
              </Field>
              <Field label="Open for (minutes)">
                {(id) => (
                  <input id={id} type="number" min={1} max={10080} value={duration} onChange={(e) => setDuration(Number(e.target.value))} />
                )}
              </Field>
              <Field label="Time zone">{(id) => <input id={id} value={zone} onChange={(e) => setZone(e.target.value)} />}</Field>
            </>
          )}
          <section aria-labelledby="preview" aria-live="polite">
            <h3 id="preview">Preview</h3>
            {preview.error ? (
              <ErrorNote error={preview.error} />
            ) : preview.data ? (
              <>
                <p data-testid="scope-count">
                  Covers <strong>{preview.data.hosts.toLocaleString()}</strong> host{preview.data.hosts === 1 ? "" : "s"} now.
                </p>
                {hasWindow && (
                  <>
                    <p>Next openings ({zone}):</p>
                    <Openings openings={preview.data.openings} zone={zone} />
                  </>
                )}
              </>
            ) : (
              <p className="muted">…</p>
            )}
          </section>
        </fieldset>
        <fieldset className="panel span2" disabled={readOnly}>
          <legend>Rollout</legend>
          <label className="check">
            <input type="checkbox" checked={inWaves} onChange={(e) => setInWaves(e.target.checked)} />
            Go out in waves
          </label>
          {!inWaves && <p className="hint">Without waves every host gets the change at its next check-in.</p>}
          {inWaves && (
            <>
              <p className="hint">
                Each wave takes a count of hosts or a share of the proposal's hosts (&quot;25%&quot;); hosts a wave&apos;s selector
                matches go into it first (canaries); the hosts left after the last wave form <code>rest</code>. A wave begins when the
                one before it is done and soaked.
              </p>
              <ol className="wave-rows">
                {waves.map((w, i) => (
                  <li key={i}>
                    <Field label={`Wave ${i + 1} name`}>
                      {(id) => <input id={id} required value={w.name} onChange={(e) => setWave(i, { name: e.target.value })} />}
                    </Field>
                    <Field label={`Wave ${i + 1} size`}>
                      {(id) => (
                        <input id={id} required value={w.size} placeholder="2 or 25%" onChange={(e) => setWave(i, { size: e.target.value })} />
                      )}
                    </Field>
                    <Field label={`Wave ${i + 1} canaries (selector, optional)`}>
                      {(id) => (
                        <input id={id} value={w.selector} placeholder="canary=true" onChange={(e) => setWave(i, { selector: e.target.value })} />
                      )}
                    </Field>
                    <button type="button" onClick={() => setWaves((ws) => ws.filter((_, j) => j !== i))}>
                      Remove wave {i + 1}
                    </button>
                  </li>
                ))}
              </ol>
              <button
                type="button"
                onClick={() => setWaves((ws) => [...ws, { name: `wave ${ws.length + 1}`, size: "25%", selector: "" }])}
                disabled={waves.length >= 20}
              >
                Add a wave
              </button>
              <div className="grid2">
                <Field label="Soak (minutes)" hint="How long a done wave waits after its last result.">
                  {(id) => <input id={id} type="number" min={0} max={10080} value={soak} onChange={(e) => setSoak(Number(e.target.value))} />}
                </Field>
                <Field label="Success needed (%)" hint="Below it, the rollout halts when the wave is done.">
                  {(id) => (
                    <input id={id} type="number" min={0} max={100} value={success} onChange={(e) => setSuccess(Number(e.target.value))} />
                  )}
                </Field>
                <Field label="Halt after failures" hint="A count or a share of the proposal's hosts (5%).">
                  {(id) => <input id={id} required value={haltAfter} onChange={(e) => setHaltAfter(e.target.value)} />}
                </Field>
                <Field label="At most in flight (optional)" hint="Jobs of the wave out at once.">
                  {(id) => (
                    <input id={id} type="number" min={1} value={maxInFlight} onChange={(e) => setMaxInFlight(e.target.value)} />
                  )}
                </Field>
              </div>
              {preview.data && !preview.error && <WaveSizes waves={preview.data.waves} />}
            </>
          )}
        </fieldset>
        {!readOnly && (
          <div className="buttons span2">
            <ErrorNote error={save.error ?? remove.error} />
            <button type="submit" className="primary" disabled={save.isPending}>
              {existing ? "Save policy" : "Create policy"}
            </button>
            {existing && (
              <ConfirmButton
                label="Delete policy"
                confirm="Delete it: open proposals close"
                onConfirm={() => remove.mutate()}
                disabled={remove.isPending}
              />
            )}
          </div>
        )}
      </form>
      {existing?.window && (
        <section className="panel">
          <h2>Saved window</h2>
          <p>
            Next opens <When at={existing.window.next_opening} zone={existing.window.time_zone} />
          </p>
          <Openings openings={existing.window.openings} zone={existing.window.time_zone} />
        </section>
      )}
    </>
  );
}
