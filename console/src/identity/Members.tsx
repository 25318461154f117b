// Members (roles, removal) and invitations (sent by email, revocable).
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap, type Schemas } from "../api/client";
import { useMe, useRights } from "../api/session";
import { ConfirmButton, Empty, ErrorNote, Field, Loaded, PageTitle, Pager, Status, When, useCursorPages } from "../ui/kit";

const ROLES = ["owner", "admin", "operator", "viewer"] as const;

export function MembersPage({ org }: { org: string }) {
  const pages = useCursorPages();
  const members = useQuery({
    queryKey: ["members", org, pages.cursor],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/members", { params: { path: { org }, query: { cursor: pages.cursor } } })),
  });
  return (
    <>
      <PageTitle>Members</PageTitle>
      <Loaded query={members}>
        {(page) => (
          <>
            <div className="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Member</th>
                    <th scope="col">Role</th>
                    <th scope="col">Joined</th>
                    <th scope="col">
                      <span className="sr-only">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {page.items.map((m) => (
                    <MemberRow key={m.id} org={org} member={m} />
                  ))}
                </tbody>
              </table>
            </div>
            <Pager pages={pages} nextCursor={page.next_cursor} />
          </>
        )}
      </Loaded>
      <Invitations org={org} />
    </>
  );
}

function MemberRow({ org, member: m }: { org: string; member: Schemas["Member"] }) {
  const rights = useRights(org);
  const me = useMe();
  const queries = useQueryClient();
  const path = { org, member_id: m.id };
  const done = () => queries.invalidateQueries({ queryKey: ["members", org] });
  const change = useMutation({
    mutationFn: async (role: Schemas["RoleChange"]["role"]) =>
      unwrap(await api.PATCH("/v1/orgs/{org}/members/{member_id}", { params: { path }, body: { role } })),
    onSuccess: done,
  });
  const remove = useMutation({
    mutationFn: async () => unwrap(await api.DELETE("/v1/orgs/{org}/members/{member_id}", { params: { path } })),
    onSuccess: done,
  });
  const self = me.data?.id === m.id;
  const roles = rights.owner ? ROLES : ROLES.filter((r) => r !== "owner");
  const editable = rights.administer && (rights.owner || m.role !== "owner");
  return (
    <tr>
      <td>
        {m.name ?? m.email}
        {m.name && <div className="muted small">{m.email}</div>}
      </td>
      <td>
        {editable ? (
          <label>
            <span className="sr-only">Role of {m.email}</span>
            <select value={m.role} onChange={(e) => change.mutate(e.target.value as Schemas["RoleChange"]["role"])} disabled={change.isPending}>
              {roles.map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          </label>
        ) : (
          m.role
        )}
        <ErrorNote error={change.error} />
      </td>
      <td>
        <When at={m.joined_at} />
      </td>
      <td>
        {editable && !self && (
          <ConfirmButton
            label="Remove"
            what={m.email}
            confirm={`Remove ${m.email}`}
            onConfirm={() => remove.mutate()}
            disabled={remove.isPending}
          />
        )}
        <ErrorNote error={remove.error} />
      </td>
    </tr>
  );
}

function Invitations({ org }: { org: string }) {
  const rights = useRights(org);
  const queries = useQueryClient();
  const pages = useCursorPages();
  const [email, setEmail] = useState("");
  const [role, setRole] = useState<Schemas["NewInvitation"]["role"]>("operator");
  const invitations = useQuery({
    queryKey: ["invitations", org, pages.cursor],
    queryFn: async () =>
      unwrap(await api.GET("/v1/orgs/{org}/invitations", { params: { path: { org }, query: { cursor: pages.cursor } } })),
  });
  const invite = useMutation({
    mutationFn: async () =>
      unwrap(await api.POST("/v1/orgs/{org}/invitations", { params: { path: { org } }, body: { email: email.trim(), role } })),
    onSuccess: () => {
      setEmail("");
      void queries.invalidateQueries({ queryKey: ["invitations", org] });
    },
  });
  const revoke = useMutation({
    mutationFn: async (id: string) =>
      unwrap(await api.DELETE("/v1/orgs/{org}/invitations/{invitation_id}", { params: { path: { org, invitation_id: id } } })),
    onSuccess: () => queries.invalidateQueries({ queryKey: ["invitations", org] }),
  });
  return (
    <section className="panel">
      <h2>Invitations</h2>
      <form
        className="inline"
        onSubmit={(e) => {
          e.preventDefault();
          invite.mutate();
        }}
      >
        <Field label="Email address">
          {(id) => <input id={id} type="email" required value={email} onChange={(e) => setEmail(e.target.value)} />}
        </Field>
        <Field label="Role">
          {(id) => (
            <select id={id} value={role} onChange={(e) => setRole(e.target.value as typeof role)}>
              {(rights.owner ? ROLES : ROLES.filter((r) => r !== "owner")).map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          )}
        </Field>
        <button type="submit" className="primary" disabled={invite.isPending}>
          Send invitation
        </button>
      </form>
      <ErrorNote error={invite.error ?? revoke.error} />
      {invite.isSuccess && <p role="status">Invitation sent.</p>}
      <Loaded query={invitations}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No invitation.</Empty>
          ) : (
            <>
              <ul className="plain">
                {page.items.map((i) => (
                  <li key={i.id}>
                    {i.email} as {i.role} <Status value={i.status} /> <span className="muted small">expires</span>{" "}
                    <When at={i.expires_at} />{" "}
                    {i.status === "pending" && (
                      <button type="button" className="link" onClick={() => revoke.mutate(i.id)}>
                        Revoke<span className="sr-only"> the invitation of {i.email}</span>
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
