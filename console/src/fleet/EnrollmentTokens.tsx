// Enrolment tokens: made with labels, a use limit and an expiry; the value is shown once,
// with the agent's install and enrol commands ready to copy; revoked by admins.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap, type Schemas } from "../api/client";
import { useRights } from "../api/session";
import {
  CopyBlock,
  Empty,
  ErrorNote,
  Field,
  Labels,
  Loaded,
  PageTitle,
  Pager,
  Secret,
  Status,
  When,
  parseLabels,
  useCursorPages,
} from "../ui/kit";

/** The commands that install the reference agent and enrol this machine with `token`. */
export function enrolCommands(token: string): string {
  const server = window.location.origin;
  return [
    "# Debian, Ubuntu:",
    "sudo apt-get install -y fleet-agent",
    "# RHEL, Rocky, Alma, Fedora:",
    "sudo dnf install -y fleet-agent",
    "",
    `sudo fleet-agent enroll --server ${server} --token ${token}`,
    "sudo systemctl enable --now fleet-agent",
  ].join("\n");
}

export function EnrollmentTokensPage({ org }: { org: string }) {
  const rights = useRights(org);
  const pages = useCursorPages();
  const tokens = useQuery({
    queryKey: ["enrollment-tokens", org, pages.cursor],
    queryFn: async () =>
      unwrap(
        await api.GET("/v1/orgs/{org}/enrollment-tokens", {
          params: { path: { org }, query: { cursor: pages.cursor } },
        }),
      ),
  });
  return (
    <>
      <PageTitle>Enrolment tokens</PageTitle>
      <p className="muted">A host joins the organization by enrolling with a token; its labels go on every host it enrols.</p>
      {rights.manage && <NewToken org={org} />}
      <Loaded query={tokens}>
        {(page) =>
          page.items.length === 0 ? (
            <Empty>No token yet.</Empty>
          ) : (
            <>
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Name</th>
                      <th scope="col">Labels</th>
                      <th scope="col">Uses</th>
                      <th scope="col">Expires</th>
                      <th scope="col">State</th>
                      <th scope="col">
                        <span className="sr-only">Actions</span>
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {page.items.map((t) => (
                      <TokenRow key={t.id} org={org} token={t} canRevoke={rights.manage} />
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

function TokenRow({ org, token: t, canRevoke }: { org: string; token: Schemas["EnrollmentToken"]; canRevoke: boolean }) {
  const queries = useQueryClient();
  const revoke = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.DELETE("/v1/orgs/{org}/enrollment-tokens/{token_id}", { params: { path: { org, token_id: t.id } } }),
      ),
    onSuccess: () => queries.invalidateQueries({ queryKey: ["enrollment-tokens", org] }),
  });
  return (
    <tr>
      <td>{t.name}</td>
      <td>
        <Labels labels={t.labels} />
      </td>
      <td>
        {t.uses}
        {t.max_uses != null && ` of ${t.max_uses}`}
      </td>
      <td>{t.expires_at ? <When at={t.expires_at} /> : <span className="muted">never</span>}</td>
      <td>{t.revoked_at ? <Status value="revoked" /> : t.usable ? <Status value="usable" /> : <Status value="used up or expired" />}</td>
      <td>
        {canRevoke && !t.revoked_at && (
          <button type="button" className="link" onClick={() => revoke.mutate()} disabled={revoke.isPending}>
            Revoke<span className="sr-only"> {t.name}</span>
          </button>
        )}
        <ErrorNote error={revoke.error} />
      </td>
    </tr>
  );
}

function NewToken({ org }: { org: string }) {
  const queries = useQueryClient();
  const [name, setName] = useState("");
  const [labels, setLabels] = useState("");
  const [maxUses, setMaxUses] = useState("");
  const [expires, setExpires] = useState("");
  const create = useMutation({
    mutationFn: async () => {
      const parsed = parseLabels(labels);
      if (parsed.error) throw new Error(parsed.error);
      return unwrap(
        await api.POST("/v1/orgs/{org}/enrollment-tokens", {
          params: { path: { org } },
          body: {
            name: name.trim(),
            labels: parsed.labels,
            max_uses: maxUses ? Number(maxUses) : null,
            expires_at: expires ? new Date(expires).toISOString() : null,
          },
        }),
      );
    },
    onSuccess: () => queries.invalidateQueries({ queryKey: ["enrollment-tokens", org] }),
  });
  const made = create.data?.token;
  return (
    <details className="panel" open={Boolean(made)}>
      <summary>New enrolment token</summary>
      {made ? (
        <div className="stack">
          <Secret label="Token" value={made} />
          <CopyBlock label="Install the agent and enrol a machine" text={enrolCommands(made)} />
          <button type="button" onClick={() => create.reset()}>
            Done
          </button>
        </div>
      ) : (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            create.mutate();
          }}
        >
          <Field label="Name">{(id) => <input id={id} required value={name} onChange={(e) => setName(e.target.value)} />}</Field>
          <Field label="Labels" hint="key=value, separated by commas; put on every host it enrols.">
            {(id) => <input id={id} value={labels} placeholder="env=prod, tier=web" onChange={(e) => setLabels(e.target.value)} />}
          </Field>
          <Field label="Most hosts (optional)">
            {(id) => <input id={id} type="number" min={1} value={maxUses} onChange={(e) => setMaxUses(e.target.value)} />}
          </Field>
          <Field label="Expires (optional)">
            {(id) => <input id={id} type="datetime-local" value={expires} onChange={(e) => setExpires(e.target.value)} />}
          </Field>
          <ErrorNote error={create.error} />
          <button type="submit" className="primary" disabled={create.isPending}>
            Create token
          </button>
        </form>
      )}
    </details>
  );
}
