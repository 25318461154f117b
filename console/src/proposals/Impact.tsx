// What approving a proposal would do to its hosts (decisions §21), shown before the approve
// button: the warnings, how many hosts reboot and how many did not say, the units that restart
// and the packages installed and removed (most hosts first), and each host's own impact a page
// at a time.
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "wouter";
import { api, unwrap, type Schemas } from "../api/client";
import { Badge, Loaded, Pager, useCursorPages } from "../ui/kit";

type Detail = Schemas["ProposalDetail"];
type HostImpact = Schemas["HostImpactView"];

const hostsWord = (n: number) => `${n} host${n === 1 ? "" : "s"}`;

export function ImpactPanel({ org, proposal: p }: { org: string; proposal: Detail }) {
  const impact = p.impact;
  const [open, setOpen] = useState(false);
  const lists: { title: string; entries: { name: string; hosts: number }[]; total: number }[] = [
    { title: "Units restarting", entries: impact.restarts.map((r) => ({ name: r.unit, hosts: r.hosts })), total: impact.restarts_total },
    { title: "Packages installed", entries: impact.installs, total: impact.installs_total },
    { title: "Packages removed", entries: impact.removes, total: impact.removes_total },
  ];
  return (
    <section className={`panel impact${p.warnings.length > 0 ? " warn" : ""}`} aria-labelledby="impact">
      <h2 id="impact">What approving does</h2>
      {p.warnings.length > 0 && (
        <ul className="warnings" aria-label="Warnings">
          {p.warnings.map((w) => (
            <li key={w}>
              <strong>Warning:</strong> {w}
            </li>
          ))}
        </ul>
      )}
      <dl className="facts impact-counts">
        <div>
          <dt>Hosts</dt>
          <dd data-testid="impact-hosts">{impact.hosts}</dd>
        </div>
        <div>
          <dt>Reboot</dt>
          <dd data-testid="impact-rebooting">{hostsWord(impact.hosts_rebooting)}</dd>
        </div>
        <div>
          <dt>Impact unknown</dt>
          <dd data-testid="impact-unknown">
            {hostsWord(impact.hosts_unknown)}
            {impact.hosts_unknown > 0 && (
              <span className="muted small"> (their agents did not say what the change would do: not the same as no impact)</span>
            )}
          </dd>
        </div>
      </dl>
      <div className="impact-lists">
        {lists.map((list) => (
          <div key={list.title}>
            <h3>{list.title}</h3>
            {list.entries.length === 0 ? (
              <p className="muted small">None reported.</p>
            ) : (
              <ul className="plain">
                {list.entries.map((e) => (
                  <li key={e.name}>
                    <code>{e.name}</code> <span className="muted">on {hostsWord(e.hosts)}</span>
                  </li>
                ))}
                {list.total > list.entries.length && <li className="muted small">… and {list.total - list.entries.length} more</li>}
              </ul>
            )}
          </div>
        ))}
      </div>
      <button type="button" onClick={() => setOpen(!open)} aria-expanded={open}>
        {open ? "Hide each host's impact" : "Each host's impact"}
      </button>
      {open && <PerHost org={org} id={p.id} />}
    </section>
  );
}

function PerHost({ org, id }: { org: string; id: string }) {
  const pages = useCursorPages();
  const page = useQuery({
    queryKey: ["proposal-impact", org, id, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/proposals/{proposal_id}/impact", {
          params: { path: { org, proposal_id: id }, query: { limit: 50, cursor: pages.cursor } },
        }),
      ),
  });
  return (
    <Loaded query={page}>
      {(list) => (
        <>
          <div className="table-wrap">
            <table aria-label="Each host's impact">
              <thead>
                <tr>
                  <th scope="col">Host</th>
                  <th scope="col">Reboot</th>
                  <th scope="col">Restarts</th>
                  <th scope="col">Installs</th>
                  <th scope="col">Removes</th>
                </tr>
              </thead>
              <tbody>
                {list.items.map((h) => (
                  <tr key={h.id}>
                    <td>
                      <Link href={`/orgs/${org}/hosts/${h.id}`}>{h.display_name ?? h.hostname}</Link>{" "}
                      {!h.impact.known && <Badge tone="muted">unknown</Badge>}
                    </td>
                    <td>{h.impact.reboot ? <Badge tone="warn">reboots</Badge> : <span className="muted">no</span>}</td>
                    <td>{names(h.impact.restarts)}</td>
                    <td>{names(h.impact.installs.map((i) => `${i.name} ${i.version}`))}</td>
                    <td>{names(h.impact.removes)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <Pager pages={pages} nextCursor={list.next_cursor} />
        </>
      )}
    </Loaded>
  );
}

function names(list: string[]) {
  if (list.length === 0) return <span className="muted">—</span>;
  return <span className="small">{list.join(", ")}</span>;
}

/** A host's impact in a few words, for lists of hosts. */
export function ImpactBadges({ impact }: { impact: HostImpact }) {
  return (
    <>
      {impact.reboot && <Badge tone="warn">reboots</Badge>}
      {impact.restarts.length > 0 && (
        <Badge tone="info">
          restarts {impact.restarts.length} unit{impact.restarts.length === 1 ? "" : "s"}
        </Badge>
      )}
      {impact.removes.length > 0 && <Badge tone="bad">removes {impact.removes.length}</Badge>}
      {!impact.known && <Badge tone="muted">impact unknown</Badge>}
    </>
  );
}
