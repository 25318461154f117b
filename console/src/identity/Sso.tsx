// Single sign-on (the connection to the identity provider, domain claims with the TXT record
// to publish, verification) and the SCIM token, which is shown once. Owners only (§4, §18).
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap, type Schemas } from "../api/client";
import { CopyBlock, Empty, ErrorNote, Field, Loaded, PageTitle, Secret, When } from "../ui/kit";

type Mapping = Schemas["SsoRoleMapping"];

export function SsoPage({ org }: { org: string }) {
  const sso = useQuery({
    queryKey: ["sso", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/sso", { params: { path: { org } } })),
    retry: false,
  });
  return (
    <>
      <PageTitle>Single sign-on and SCIM</PageTitle>
      <Loaded query={sso}>
        {(settings) => (
          <>
            <Connection org={org} settings={settings} />
            <Domains org={org} domains={settings.domains} />
          </>
        )}
      </Loaded>
      <Scim org={org} />
    </>
  );
}

function Connection({ org, settings }: { org: string; settings: Schemas["SsoSettings"] }) {
  const queries = useQueryClient();
  const c = settings.connection;
  const [issuer, setIssuer] = useState(c?.issuer ?? "");
  const [clientId, setClientId] = useState(c?.client_id ?? "");
  const [secret, setSecret] = useState("");
  const [enabled, setEnabled] = useState(c?.enabled ?? false);
  const [enforced, setEnforced] = useState(c?.enforced ?? false);
  const [groupsClaim, setGroupsClaim] = useState(c?.groups_claim ?? "groups");
  const [defaultRole, setDefaultRole] = useState<Mapping["role"] | "">((c?.default_role ?? "") as Mapping["role"] | "");
  const [mappings, setMappings] = useState<Mapping[]>(c?.role_mappings ?? []);
  const save = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.PUT("/v1/orgs/{org}/sso", {
          params: { path: { org } },
          body: {
            issuer: issuer.trim(),
            client_id: clientId.trim(),
            client_secret: secret || null,
            enabled,
            enforced,
            groups_claim: groupsClaim.trim() || null,
            default_role: defaultRole || null,
            role_mappings: mappings.filter((m) => m.group.trim()),
          },
        }),
      ),
    onSuccess: (saved) => {
      setSecret("");
      queries.setQueryData(["sso", org], saved);
    },
  });
  return (
    <section className="panel">
      <h2>Connection</h2>
      <p>
        Register this redirect address at your identity provider:
      </p>
      <CopyBlock label="Redirect URI" text={settings.redirect_uri} />
      <form
        onSubmit={(e) => {
          e.preventDefault();
          save.mutate();
        }}
      >
        <Field label="Issuer (https)">{(id) => <input id={id} required value={issuer} onChange={(e) => setIssuer(e.target.value)} />}</Field>
        <Field label="Client id">{(id) => <input id={id} required value={clientId} onChange={(e) => setClientId(e.target.value)} />}</Field>
        <Field label="Client secret" hint={c ? "Leave empty to keep the stored one (needed again when issuer or client id change)." : undefined}>
          {(id) => <input id={id} type="password" autoComplete="off" value={secret} onChange={(e) => setSecret(e.target.value)} />}
        </Field>
        <Field label="Groups claim">{(id) => <input id={id} value={groupsClaim} onChange={(e) => setGroupsClaim(e.target.value)} />}</Field>
        <Field label="Role for people no mapping matches">
          {(id) => (
            <select id={id} value={defaultRole} onChange={(e) => setDefaultRole(e.target.value as Mapping["role"] | "")}>
              <option value="">none: refuse them</option>
              <option value="admin">admin</option>
              <option value="operator">operator</option>
              <option value="viewer">viewer</option>
            </select>
          )}
        </Field>
        <fieldset>
          <legend>Role mappings</legend>
          {mappings.map((m, i) => (
            <div key={i} className="inline">
              <label>
                Group{" "}
                <input
                  value={m.group}
                  onChange={(e) => setMappings((ms) => ms.map((x, j) => (j === i ? { ...x, group: e.target.value } : x)))}
                />
              </label>
              <label>
                Role{" "}
                <select
                  value={m.role}
                  onChange={(e) => setMappings((ms) => ms.map((x, j) => (j === i ? { ...x, role: e.target.value as Mapping["role"] } : x)))}
                >
                  <option value="admin">admin</option>
                  <option value="operator">operator</option>
                  <option value="viewer">viewer</option>
                </select>
              </label>
              <button type="button" className="link" onClick={() => setMappings((ms) => ms.filter((_, j) => j !== i))}>
                Remove
              </button>
            </div>
          ))}
          <button type="button" onClick={() => setMappings((ms) => [...ms, { group: "", role: "viewer" }])}>
            Add a mapping
          </button>
        </fieldset>
        <label className="check">
          <input type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.target.checked)} />
          Enabled
        </label>
        <label className="check">
          <input type="checkbox" checked={enforced} onChange={(e) => setEnforced(e.target.checked)} />
          Enforced (addresses at verified domains must sign in through it)
        </label>
        <ErrorNote error={save.error} />
        {save.isSuccess && <p role="status">Saved.</p>}
        <button type="submit" className="primary" disabled={save.isPending}>
          Save connection
        </button>
      </form>
    </section>
  );
}

function Domains({ org, domains }: { org: string; domains: Schemas["SsoDomainClaim"][] }) {
  const queries = useQueryClient();
  const [domain, setDomain] = useState("");
  const refresh = () => queries.invalidateQueries({ queryKey: ["sso", org] });
  const claim = useMutation({
    mutationFn: async () =>
      unwrap(await api.POST("/v1/orgs/{org}/sso/domains", { params: { path: { org } }, body: { domain: domain.trim() } })),
    onSuccess: () => {
      setDomain("");
      void refresh();
    },
  });
  const verify = useMutation({
    mutationFn: async (d: string) =>
      unwrap(await api.POST("/v1/orgs/{org}/sso/domains/{domain}/verify", { params: { path: { org, domain: d } } })),
    onSuccess: refresh,
  });
  const release = useMutation({
    mutationFn: async (d: string) =>
      unwrap(await api.DELETE("/v1/orgs/{org}/sso/domains/{domain}", { params: { path: { org, domain: d } } })),
    onSuccess: refresh,
  });
  return (
    <section className="panel">
      <h2>Domains</h2>
      {domains.length === 0 && <Empty>No domain claimed.</Empty>}
      <ul className="plain stack">
        {domains.map((d) => (
          <li key={d.domain}>
            <strong>{d.domain}</strong>{" "}
            {d.verified ? (
              <span>
                verified <When at={d.verified_at} />
              </span>
            ) : (
              <>
                <span className="muted">not verified: publish this TXT record, then verify.</span>
                <CopyBlock label={`TXT ${d.txt_name}`} text={d.txt_value} />
                <button type="button" onClick={() => verify.mutate(d.domain)} disabled={verify.isPending}>
                  Verify {d.domain}
                </button>
              </>
            )}{" "}
            <button type="button" className="link" onClick={() => release.mutate(d.domain)}>
              Release<span className="sr-only"> {d.domain}</span>
            </button>
          </li>
        ))}
      </ul>
      <form
        className="inline"
        onSubmit={(e) => {
          e.preventDefault();
          claim.mutate();
        }}
      >
        <Field label="Claim a domain">{(id) => <input id={id} required value={domain} placeholder="example.com" onChange={(e) => setDomain(e.target.value)} />}</Field>
        <button type="submit" disabled={claim.isPending}>
          Claim
        </button>
      </form>
      <ErrorNote error={claim.error ?? verify.error ?? release.error} />
    </section>
  );
}

function Scim({ org }: { org: string }) {
  const queries = useQueryClient();
  const status = useQuery({
    queryKey: ["scim", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}/scim/token", { params: { path: { org } } })),
    retry: false,
  });
  const issue = useMutation({
    mutationFn: async () => unwrap(await api.POST("/v1/orgs/{org}/scim/token", { params: { path: { org } } })),
    onSuccess: () => queries.invalidateQueries({ queryKey: ["scim", org] }),
  });
  const revoke = useMutation({
    mutationFn: async () => unwrap(await api.DELETE("/v1/orgs/{org}/scim/token", { params: { path: { org } } })),
    onSuccess: () => {
      issue.reset();
      void queries.invalidateQueries({ queryKey: ["scim", org] });
    },
  });
  return (
    <section className="panel">
      <h2>SCIM provisioning</h2>
      <Loaded query={status}>
        {(s) => (
          <div className="stack">
            <CopyBlock label="SCIM base URL" text={s.base_url} />
            <p>
              {s.issued ? (
                <>
                  A token was issued <When at={s.issued_at} />; last used <When at={s.last_used_at} />.
                </>
              ) : (
                "No token is issued."
              )}
            </p>
            {issue.data?.token && <Secret label="SCIM token" value={issue.data.token} />}
            <div className="buttons">
              <button type="button" onClick={() => issue.mutate()} disabled={issue.isPending}>
                {s.issued ? "Issue a new token (replaces the old one)" : "Issue a token"}
              </button>
              {s.issued && (
                <button type="button" className="danger" onClick={() => revoke.mutate()} disabled={revoke.isPending}>
                  Revoke
                </button>
              )}
            </div>
          </div>
        )}
      </Loaded>
      <ErrorNote error={issue.error ?? revoke.error} />
    </section>
  );
}
