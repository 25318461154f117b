// Groups: static members set by hand, label-selected members picked by a selector, with a live
// count of the hosts a selector matches while it is typed (`countHosts`).
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useLocation } from "wouter";
import { api, unwrap } from "../api/client";
import { useRights } from "../api/session";
import { ConfirmButton, Empty, ErrorNote, Field, Loaded, PageTitle, Pager, Status, useCursorPages, useDebounced } from "../ui/kit";

/** How many hosts `selector` matches now, while it is typed. */
export function SelectorCount({ org, selector }: { org: string; selector: string }) {
  const typed = useDebounced(selector.trim(), 400);
  const count = useQuery({
    queryKey: ["hosts-count", org, { selector: typed }],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/hosts/count", { params: { path: { org }, query: { selector: typed } } })),
    enabled: typed.length > 0,
    placeholderData: keepPreviousData,
    retry: false,
  });
  if (!typed) return null;
  if (count.error) return <ErrorNote error={count.error} />;
  return (
    <p className="hint" role="status" aria-live="polite">
      {count.data ? `Matches ${count.data.count.toLocaleString()} host${count.data.count === 1 ? "" : "s"} now.` : "Counting…"}
    </p>
  );
}

export function GroupsPage({ org }: { org: string }) {
  const rights = useRights(org);
  const pages = useCursorPages();
  const groups = useQuery({
    queryKey: ["groups", org, pages.cursor],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/groups", { params: { path: { org }, query: { cursor: pages.cursor } } })),
  });
  return (
    <>
      <PageTitle>Groups</PageTitle>
      {rights.operate && <NewGroup org={org} />}
      <Loaded query={groups}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No group yet.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Name</th>
                      <th scope="col">Selector</th>
                      <th scope="col">Static hosts</th>
                      <th scope="col">Label-selected hosts</th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((g) => (
                      <tr key={g.id}>
                        <td>
                          <Link href={`/orgs/${org}/groups/${g.id}`}>{g.name}</Link>
                        </td>
                        <td>{g.selector ? <code>{g.selector}</code> : <span className="muted">—</span>}</td>
                        <td>{g.static_hosts}</td>
                        <td>{g.label_hosts}</td>
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

function NewGroup({ org }: { org: string }) {
  const [name, setName] = useState("");
  const [selector, setSelector] = useState("");
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const create = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.POST("/v1/orgs/{org}/groups", {
          params: { path: { org } },
          body: { name: name.trim(), selector: selector.trim() || null },
        }),
      ),
    onSuccess: (group) => {
      void queries.invalidateQueries({ queryKey: ["groups", org] });
      navigate(`/orgs/${org}/groups/${group.id}`);
    },
  });
  return (
    <details className="panel">
      <summary>New group</summary>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          create.mutate();
        }}
      >
        <Field label="Name">{(id) => <input id={id} required value={name} onChange={(e) => setName(e.target.value)} />}</Field>
        <Field label="Label selector (optional)" hint="Hosts it matches are members besides those you add by hand.">
          {(id) => <input id={id} value={selector} placeholder="env=prod" onChange={(e) => setSelector(e.target.value)} />}
        </Field>
        <SelectorCount org={org} selector={selector} />
        <ErrorNote error={create.error} />
        <button type="submit" className="primary" disabled={create.isPending}>
          Create group
        </button>
      </form>
    </details>
  );
}

export function GroupDetailPage({ org, id }: { org: string; id: string }) {
  const rights = useRights(org);
  const group = useQuery({
    queryKey: ["group", org, id],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/groups/{group_id}", { params: { path: { org, group_id: id } } })),
  });
  return (
    <Loaded query={group}>
      {(g) => (
        <>
          <PageTitle>{g.name}</PageTitle>
          <p className="crumbs">
            <Link href={`/orgs/${org}/groups`}>Groups</Link> / {g.name}
          </p>
          {rights.operate && <EditGroup org={org} group={g} />}
          <Members org={org} id={id} canEdit={rights.operate} />
        </>
      )}
    </Loaded>
  );
}

function EditGroup({
  org,
  group,
}: {
  org: string;
  group: { id: string; name: string; selector?: string | null };
}) {
  const [name, setName] = useState(group.name);
  const [selector, setSelector] = useState(group.selector ?? "");
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const save = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.PATCH("/v1/orgs/{org}/groups/{group_id}", {
          params: { path: { org, group_id: group.id } },
          body: { name: name.trim(), selector: selector.trim() || null },
        }),
      ),
    onSuccess: (updated) => {
      queries.setQueryData(["group", org, group.id], updated);
      void queries.invalidateQueries({ queryKey: ["groups", org] });
    },
  });
  const remove = useMutation({
    mutationFn: async () =>
      unwrap(await api.DELETE("/v1/orgs/{org}/groups/{group_id}", { params: { path: { org, group_id: group.id } } })),
    onSuccess: () => {
      void queries.invalidateQueries({ queryKey: ["groups", org] });
      navigate(`/orgs/${org}/groups`);
    },
  });
  return (
    <section className="panel">
      <h2>Settings</h2>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          save.mutate();
        }}
      >
        <Field label="Name">{(id) => <input id={id} required value={name} onChange={(e) => setName(e.target.value)} />}</Field>
        <Field label="Label selector" hint="Empty: no label-selected members.">
          {(id) => <input id={id} value={selector} onChange={(e) => setSelector(e.target.value)} />}
        </Field>
        <SelectorCount org={org} selector={selector} />
        <ErrorNote error={save.error ?? remove.error} />
        {save.isSuccess && <p role="status">Saved.</p>}
        <div className="buttons">
          <button type="submit" className="primary" disabled={save.isPending}>
            Save
          </button>
          <ConfirmButton label="Delete group" confirm="Delete this group (its hosts stay)" onConfirm={() => remove.mutate()} disabled={remove.isPending} />
        </div>
      </form>
    </section>
  );
}

/** The static members, editable: the set is read whole and written whole (`setGroupHosts`). */
function Members({ org, id, canEdit }: { org: string; id: string; canEdit: boolean }) {
  const pages = useCursorPages();
  const queries = useQueryClient();
  const members = useQuery({
    queryKey: ["hosts", org, { group: id }, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/hosts", {
          params: { path: { org }, query: { group: id, cursor: pages.cursor } },
        }),
      ),
  });
  const [adding, setAdding] = useState("");
  const typed = useDebounced(adding);
  const candidates = useQuery({
    queryKey: ["hosts", org, { q: typed }, "candidates"],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/hosts", { params: { path: { org }, query: { q: typed, limit: 10 } } })),
    enabled: canEdit && typed.trim().length > 0,
  });
  const change = useMutation({
    mutationFn: async (edit: { add?: string; remove?: string }) => {
      // The whole static set: every page of it.
      const ids = new Set<string>();
      let cursor: string | undefined;
      do {
        const page = unwrap(
          await api.GET("/v1/orgs/{org}/hosts", {
            params: { path: { org }, query: { group: id, group_source: "static", limit: 500, cursor } },
          }),
        );
        page.items.forEach((h) => ids.add(h.id));
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
      if (edit.add) ids.add(edit.add);
      if (edit.remove) ids.delete(edit.remove);
      return unwrap(
        await api.PUT("/v1/orgs/{org}/groups/{group_id}/hosts", {
          params: { path: { org, group_id: id } },
          body: { hosts: [...ids] },
        }),
      );
    },
    onSuccess: () => {
      void queries.invalidateQueries({ queryKey: ["hosts", org] });
      void queries.invalidateQueries({ queryKey: ["group", org, id] });
      setAdding("");
    },
  });
  return (
    <section className="panel">
      <h2>Members</h2>
      {canEdit && (
        <div className="add-member">
          <label>
            Add a host by name{" "}
            <input type="search" value={adding} onChange={(e) => setAdding(e.target.value)} />
          </label>
          {candidates.data && (
            <ul className="plain">
              {candidates.data.items.map((h) => (
                <li key={h.id}>
                  {h.hostname}{" "}
                  <button type="button" onClick={() => change.mutate({ add: h.id })} disabled={change.isPending}>
                    Add
                  </button>
                </li>
              ))}
            </ul>
          )}
        </div>
      )}
      <ErrorNote error={change.error ?? members.error} />
      <Loaded query={members}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No member yet.</Empty>
          ) : (
            <>
              <ul className="plain">
                {page.items.map((h) => (
                  <li key={h.id}>
                    <Link href={`/orgs/${org}/hosts/${h.id}`}>{h.hostname}</Link> <Status value={h.status} />
                    {canEdit && (
                      <button
                        type="button"
                        className="link"
                        onClick={() => change.mutate({ remove: h.id })}
                        disabled={change.isPending}
                        aria-label={`Remove ${h.hostname} from the static members`}
                      >
                        remove
                      </button>
                    )}
                  </li>
                ))}
              </ul>
              <Pager pages={pages} nextCursor={page.next_cursor} />
            </>
          )
        }
      </Loaded>
    </section>
  );
}
