// Proposals by status: what awaits approval, what goes ahead, what is done.
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { useEffect } from "react";
import { Link, useSearchParams } from "wouter";
import { api, unwrap } from "../api/client";
import { Empty, Kev, Loaded, PageTitle, Pager, Status, When, useCursorPages } from "../ui/kit";

const TABS: [string, string][] = [
  ["open", "Awaiting approval"],
  ["scheduled", "Scheduled"],
  ["approved", "Approved"],
  ["applying", "Applying"],
  ["snoozed", "Snoozed"],
  ["applied", "Applied"],
  ["rejected", "Rejected"],
  ["", "All"],
];

export function ProposalsPage({ org }: { org: string }) {
  const [params, setParams] = useSearchParams();
  const status = params.get("status") ?? "open";
  const pages = useCursorPages();
  useEffect(() => pages.reset(), [status]);
  const list = useQuery({
    queryKey: ["proposals", org, status, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/proposals", {
          params: { path: { org }, query: { status: status || undefined, cursor: pages.cursor } },
        }),
      ),
    placeholderData: keepPreviousData,
  });
  return (
    <>
      <PageTitle>Proposals</PageTitle>
      <nav className="subnav" aria-label="Proposal status">
        {TABS.map(([value, label]) => (
          <a
            key={value}
            href={`?status=${value}`}
            aria-current={status === value ? "page" : undefined}
            onClick={(e) => {
              e.preventDefault();
              setParams({ status: value });
            }}
          >
            {label}
          </a>
        ))}
      </nav>
      <Loaded query={list}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No proposal here.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Proposal</th>
                      <th scope="col">Status</th>
                      <th scope="col">Severity</th>
                      <th scope="col">Hosts</th>
                      <th scope="col">Approvals</th>
                      <th scope="col">Opened</th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((p) => (
                      <tr key={p.id}>
                        <td>
                          <Link href={`/orgs/${org}/proposals/${p.id}`}>
                            #{p.number} {p.title}
                          </Link>
                          <div className="muted small">
                            {p.kind.replace(/_/g, " ")} · {p.packages} package{p.packages === 1 ? "" : "s"}
                            {p.policy && ` · ${p.policy.name}`}
                          </div>
                        </td>
                        <td>
                          <Status value={p.status} />
                          {p.scheduled_for && (
                            <div className="small">
                              for <When at={p.scheduled_for} />
                            </div>
                          )}
                        </td>
                        <td>
                          <Status value={p.max_severity ?? "unrated"} /> {p.known_exploited && <Kev />}
                        </td>
                        <td>{p.hosts}</td>
                        <td>
                          {p.approvals} of {p.required}
                        </td>
                        <td>
                          <When at={p.created_at} />
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
