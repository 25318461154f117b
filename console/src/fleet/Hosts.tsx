// The fleet: hosts with search, a label selector, status and advisory-coverage filters, and
// cursor paging (one page of 50 at a time, however many hosts there are), with the count the
// same filters select beside it. Filters live in the address, so a filtered list can be linked.
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { Link, useSearchParams } from "wouter";
import { api, unwrap } from "../api/client";
import { ErrorNote, Labels, PageTitle, Pager, Status, When, useCursorPages, useDebounced } from "../ui/kit";

const STATUSES = ["pending", "online", "offline", "decommissioned"];
const COVERAGE = [
  ["covered", "Covered by advisories"],
  ["no_feed", "No advisory feed"],
  ["unknown_release", "Release not resolved"],
] as const;

export function HostsPage({ org }: { org: string }) {
  const [params, setParams] = useSearchParams();
  const [q, setQ] = useState(params.get("q") ?? "");
  const [selector, setSelector] = useState(params.get("selector") ?? "");
  const status = params.get("status") ?? "";
  const coverage = params.get("coverage") ?? "";
  const security = params.get("security") === "1";
  const reboot = params.get("reboot") === "1";
  const typedQ = useDebounced(q);
  const typedSelector = useDebounced(selector, 500);
  const pages = useCursorPages();

  const setParam = (key: string, value: string) =>
    setParams(
      (p) => {
        const next = new URLSearchParams(p);
        if (value) next.set(key, value);
        else next.delete(key);
        return next;
      },
      { replace: true },
    );
  useEffect(() => setParam("q", typedQ.trim()), [typedQ]);
  useEffect(() => setParam("selector", typedSelector.trim()), [typedSelector]);

  const filters = {
    q: params.get("q") || undefined,
    selector: params.get("selector") || undefined,
    status: status || undefined,
    advisory_coverage: coverage || undefined,
    has_security_updates: security ? true : undefined,
    reboot_required: reboot ? true : undefined,
  };
  const filterKey = JSON.stringify(filters);
  useEffect(() => pages.reset(), [filterKey]);

  const list = useQuery({
    queryKey: ["hosts", org, filters, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/hosts", {
          params: { path: { org }, query: { ...filters, limit: 50, cursor: pages.cursor } },
        }),
      ),
    placeholderData: keepPreviousData,
  });
  const count = useQuery({
    queryKey: ["hosts-count", org, filters],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/hosts/count", { params: { path: { org }, query: filters } })),
    placeholderData: keepPreviousData,
  });

  return (
    <>
      <PageTitle>Hosts</PageTitle>
      <form className="filters" role="search" onSubmit={(e) => e.preventDefault()}>
        <label>
          Search
          <input type="search" value={q} placeholder="hostname or name" onChange={(e) => setQ(e.target.value)} />
        </label>
        <label>
          Labels
          <input
            value={selector}
            placeholder="env=prod,tier in (web,db)"
            onChange={(e) => setSelector(e.target.value)}
            aria-describedby="selector-hint"
          />
        </label>
        <label>
          Status
          <select value={status} onChange={(e) => setParam("status", e.target.value)}>
            <option value="">any</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Coverage
          <select value={coverage} onChange={(e) => setParam("coverage", e.target.value)}>
            <option value="">any</option>
            {COVERAGE.map(([value, label]) => (
              <option key={value} value={value}>
                {label}
              </option>
            ))}
          </select>
        </label>
        <label className="check">
          <input type="checkbox" checked={security} onChange={(e) => setParam("security", e.target.checked ? "1" : "")} />
          Security updates
        </label>
        <label className="check">
          <input type="checkbox" checked={reboot} onChange={(e) => setParam("reboot", e.target.checked ? "1" : "")} />
          Needs reboot
        </label>
      </form>
      <p id="selector-hint" className="hint">
        Label selector: <code>key=value</code>, <code>key!=value</code>, <code>key in (a,b)</code>, <code>key</code>; commas
        join them.
      </p>
      <p className="count" role="status" aria-live="polite">
        {count.data ? `${count.data.count.toLocaleString()} host${count.data.count === 1 ? "" : "s"}` : " "}
      </p>
      <ErrorNote error={list.error ?? count.error} />
      {list.data && (
        <>
          <div className="table-wrap">
            <table className="hosts">
              <thead>
                <tr>
                  <th scope="col">Host</th>
                  <th scope="col">Status</th>
                  <th scope="col">System</th>
                  <th scope="col">Updates</th>
                  <th scope="col">Labels</th>
                  <th scope="col">Last seen</th>
                </tr>
              </thead>
              <tbody>
                {list.data.items.map((h) => (
                  <tr key={h.id}>
                    <td>
                      <Link href={`/orgs/${org}/hosts/${h.id}`}>{h.display_name ?? h.hostname}</Link>
                      {h.display_name && <div className="muted small">{h.hostname}</div>}
                    </td>
                    <td>
                      <Status value={h.status} />
                    </td>
                    <td>
                      {[h.distro, h.distro_version].filter(Boolean).join(" ") || <span className="muted">—</span>}
                      {h.advisory_coverage !== "covered" && (
                        <div className="muted small">{h.advisory_coverage.replace(/_/g, " ")}</div>
                      )}
                    </td>
                    <td>
                      {h.updates ? (
                        <>
                          {h.updates.total}
                          {h.updates.security > 0 && <span className="sec"> ({h.updates.security} security)</span>}
                        </>
                      ) : (
                        <span className="muted">not evaluated</span>
                      )}
                    </td>
                    <td>
                      <Labels labels={h.labels} />
                    </td>
                    <td>
                      <When at={h.last_seen_at} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {list.data.items.length === 0 && <p className="empty">No host matches.</p>}
          <Pager pages={pages} nextCursor={list.data.next_cursor} />
        </>
      )}
    </>
  );
}
