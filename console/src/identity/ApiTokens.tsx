// API tokens: made with a role no higher than the maker's and an optional expiry; the value
// is shown once; revoked from the next request on.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap, type Schemas } from "../api/client";
import { useRights } from "../api/session";
import { Empty, ErrorNote, Field, Loaded, PageTitle, Pager, Secret, Status, When, useCursorPages } from "../ui/kit";

export function ApiTokensPage({ org }: { org: string }) {
  const rights = useRights(org);
  const queries = useQueryClient();
  const pages = useCursorPages();
  const [name, setName] = useState("");
  const [role, setRole] = useState<Schemas["NewApiToken"]["role"]>("viewer");
  const [expires, setExpires] = useState("");
  const tokens = useQuery({
    queryKey: ["api-tokens", org, pages.cursor],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/api-tokens", { params: { path: { org }, query: { cursor: pages.cursor } } })),
  });
  const create = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/api-tokens", {
          params: { path: { org } },
          body: { name: name.trim(), role, expires_at: expires ? new Date(expires).toISOString() : null },
        }),
      ),
    onSuccess: () => {
      setName("");
      void queries.invalidateQueries({ queryKey: ["api-tokens", org] });
    },
  });
  const revoke = useMutation({
    mutationFn: async (id: string) =>
      unwrap(await api.DELETE("/v1/orgs/{org}/api-tokens/{api_token_id}", { params: { path: { org, api_token_id: id } } })),
    onSuccess: () => queries.invalidateQueries({ queryKey: ["api-tokens", org] }),
  });
  const roles = ["owner", "admin", "operator", "viewer"].filter((r) => rights.owner || r !== "owner");
  return (
    <>
      <PageTitle>API tokens</PageTitle>
      <section className="panel">
        <h2>New token</h2>
        {create.data?.token ? (
          <div className="stack">
            <Secret label={`Token “${create.data.name}”`} value={create.data.token} />
            <p className="muted small">
              Send it as <code>Authorization: Bearer …</code>.
            </p>
            <button type="button" onClick={() => create.reset()}>
              Done
            </button>
          </div>
        ) : (
          <form
            className="inline"
            onSubmit={(e) => {
              e.preventDefault();
              create.mutate();
            }}
          >
            <Field label="Name">{(id) => <input id={id} required value={name} onChange={(e) => setName(e.target.value)} />}</Field>
            <Field label="Role">
              {(id) => (
                <select id={id} value={role} onChange={(e) => setRole(e.target.value as typeof role)}>
                  {roles.map((r) => (
                    <option key={r} value={r}>
                      {r}
                    </option>
                  ))}
                </select>
              )}
            </Field>
            <Field label="Expires (optional)">
              {(id) => <input id={id} type="datetime-local" value={expires} onChange={(e) => setExpires(e.target.value)} />}
            </Field>
            <button type="submit" className="primary" disabled={create.isPending}>
              Create token
            </button>
          </form>
        )}
        <ErrorNote error={create.error ?? revoke.error} />
      </section>
      <Loaded query={tokens}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No API token.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Name</th>
                      <th scope="col">Role</th>
                      <th scope="col">Made</th>
                      <th scope="col">Last used</th>
                      <th scope="col">Expires</th>
                      <th scope="col">
                        <span className="sr-only">Actions</span>
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((t) => (
                      <tr key={t.id}>
                        <td>{t.name}</td>
                        <td>{t.role}</td>
                        <td>
                          <When at={t.created_at} />
                        </td>
                        <td>
                          <When at={t.last_used_at} />
                        </td>
                        <td>{t.expires_at ? <When at={t.expires_at} /> : <span className="muted">never</span>}</td>
                        <td>
                          {t.revoked_at ? (
                            <Status value="revoked" />
                          ) : (
                            <button type="button" className="link" onClick={() => revoke.mutate(t.id)}>
                              Revoke<span className="sr-only"> {t.name}</span>
                            </button>
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
