// The audit log: who did what, newest first.
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { Empty, Loaded, PageTitle, Pager, When, useCursorPages } from "../ui/kit";

export function AuditPage({ org }: { org: string }) {
  const pages = useCursorPages();
  const events = useQuery({
    queryKey: ["audit", org, pages.cursor],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/audit-events", { params: { path: { org }, query: { cursor: pages.cursor } } })),
    placeholderData: keepPreviousData,
  });
  return (
    <>
      <PageTitle>Audit log</PageTitle>
      <Loaded query={events}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>Nothing recorded yet.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">When</th>
                      <th scope="col">Action</th>
                      <th scope="col">By</th>
                      <th scope="col">On</th>
                      <th scope="col">Details</th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((e) => (
                      <tr key={e.id}>
                        <td>
                          <When at={e.created_at} />
                        </td>
                        <td>
                          <code>{e.action}</code>
                        </td>
                        <td className="small">
                          {e.actor_id ?? e.actor_api_token_id ?? "the service"}
                          {e.ip && <div className="muted">{e.ip}</div>}
                        </td>
                        <td className="small">{e.target_id ?? "—"}</td>
                        <td className="small">{e.details != null ? <code>{JSON.stringify(e.details)}</code> : "—"}</td>
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
