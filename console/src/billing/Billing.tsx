// Billing: the plan, the month's usage (a chart of active hosts per day, host-days, the
// estimate) and checkout to a paid plan. Owners only.
import { useMutation, useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap, type Schemas } from "../api/client";
import { ErrorNote, Field, Loaded, PageTitle, When } from "../ui/kit";

function thisMonth(): string {
  return new Date().toISOString().slice(0, 7);
}

export function BillingPage({ org }: { org: string }) {
  const [month, setMonth] = useState(thisMonth());
  const billing = useQuery({
    queryKey: ["billing", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/billing", { params: { path: { org } } })),
  });
  const usage = useQuery({
    queryKey: ["usage", org, month],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/billing/usage", { params: { path: { org }, query: { month } } })),
  });
  return (
    <>
      <PageTitle>Billing</PageTitle>
      <Loaded query={billing}>{(b) => <Plan org={org} billing={b} />}</Loaded>
      <section className="panel">
        <h2>Usage</h2>
        <Field label="Month">
          {(id) => <input id={id} type="month" value={month} max={thisMonth()} onChange={(e) => setMonth(e.target.value || thisMonth())} />}
        </Field>
        <Loaded query={usage}>{(u) => <Usage usage={u} />}</Loaded>
      </section>
    </>
  );
}

function Plan({ org, billing: b }: { org: string; billing: Schemas["Billing"] }) {
  const [plan, setPlan] = useState<Schemas["PaidPlan"]>("team");
  const checkout = useMutation({
    mutationFn: async () =>
      unwrap(await api.POST("/v1/orgs/{org}/billing/checkout", { params: { path: { org } }, body: { plan } })),
    onSuccess: (answer) => window.location.assign(answer.url),
  });
  return (
    <section className="panel">
      <h2>Plan</h2>
      <p>
        <strong>{b.plan}</strong>
        {b.status && ` (${b.status.replace(/_/g, " ")})`}
        {b.current_period_end && (
          <>
            {" "}
            · period ends <When at={b.current_period_end} />
          </>
        )}
        {b.billable_from && ` · billed from ${b.billable_from}`}
      </p>
      {b.checkout_available ? (
        <form
          className="inline"
          onSubmit={(e) => {
            e.preventDefault();
            checkout.mutate();
          }}
        >
          <Field label="Change to">
            {(id) => (
              <select id={id} value={plan} onChange={(e) => setPlan(e.target.value as Schemas["PaidPlan"])}>
                <option value="team">team (10p a host a day)</option>
                <option value="business">business (20p)</option>
                <option value="enterprise">enterprise (35p)</option>
              </select>
            )}
          </Field>
          <button type="submit" className="primary" disabled={checkout.isPending}>
            Go to checkout
          </button>
        </form>
      ) : (
        <p className="muted">This deployment takes no payments.</p>
      )}
      <ErrorNote error={checkout.error} />
    </section>
  );
}

/** Active hosts per day as bars, with the numbers as a table for screen readers. */
function Usage({ usage: u }: { usage: Schemas["BillingUsage"] }) {
  const width = 640;
  const height = 160;
  const first = new Date(`${u.from}T00:00:00Z`);
  const last = new Date(`${u.to}T00:00:00Z`);
  const dayCount = Math.round((last.getTime() - first.getTime()) / 86_400_000) + 1;
  const byDay = new Map(u.days.map((d) => [d.day, d]));
  const max = Math.max(1, ...u.days.map((d) => d.active_hosts));
  const bar = width / dayCount;
  return (
    <>
      <p>
        <strong>{u.host_days.toLocaleString()}</strong> host-days from {u.from} to {u.to}
        {u.today_so_far != null && ` · ${u.today_so_far} host${u.today_so_far === 1 ? "" : "s"} so far today`}
        {u.estimate_pence != null && ` · about £${(u.estimate_pence / 100).toFixed(2)}`}
      </p>
      <svg
        className="chart"
        viewBox={`0 0 ${width} ${height + 20}`}
        role="img"
        aria-label={`Active hosts per day, at most ${max}`}
        preserveAspectRatio="none"
      >
        <line x1={0} y1={height} x2={width} y2={height} className="axis" />
        {Array.from({ length: dayCount }, (_, i) => {
          const day = new Date(first.getTime() + i * 86_400_000).toISOString().slice(0, 10);
          const entry = byDay.get(day);
          const h = entry ? (entry.active_hosts / max) * (height - 10) : 0;
          return (
            <g key={day}>
              {entry && (
                <rect x={i * bar + 1} y={height - h} width={Math.max(bar - 2, 1)} height={h} className={entry.reported ? "reported" : "bar"}>
                  <title>
                    {day}: {entry.active_hosts} hosts{entry.reported ? " (reported)" : ""}
                  </title>
                </rect>
              )}
              {(i === 0 || (i + 1) % 7 === 0) && (
                <text x={i * bar + bar / 2} y={height + 14} textAnchor="middle" className="tick">
                  {day.slice(8)}
                </text>
              )}
            </g>
          );
        })}
      </svg>
      <details>
        <summary>Days as a table</summary>
        <table>
          <thead>
            <tr>
              <th scope="col">Day</th>
              <th scope="col">Active hosts</th>
              <th scope="col">Reported</th>
            </tr>
          </thead>
          <tbody>
            {u.days.map((d) => (
              <tr key={d.day}>
                <td>{d.day}</td>
                <td>{d.active_hosts}</td>
                <td>{d.reported ? "yes" : "no"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </>
  );
}
