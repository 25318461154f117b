// The signed-in person: name and time zone (digests arrive at 08:00 in it), their
// organizations, and signing out.
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link, useLocation } from "wouter";
import { api, setCsrfToken, unwrap } from "../api/client";
import { meKey, useMe } from "../api/session";
import { ErrorNote, Field, Loaded, PageTitle } from "../ui/kit";

function zones(): string[] {
  const intl = Intl as unknown as { supportedValuesOf?: (key: string) => string[] };
  const list = intl.supportedValuesOf?.("timeZone") ?? [];
  return list.includes("UTC") ? list : ["UTC", ...list];
}

export function ProfilePage() {
  const me = useMe();
  return (
    <>
      <PageTitle>Profile</PageTitle>
      <Loaded query={me}>{(data) => (data ? <ProfileForm me={data} /> : null)}</Loaded>
    </>
  );
}

function ProfileForm({ me }: { me: NonNullable<ReturnType<typeof useMe>["data"]> }) {
  const queries = useQueryClient();
  const [, navigate] = useLocation();
  const [name, setName] = useState(me.name ?? "");
  const [zone, setZone] = useState(me.time_zone);
  const save = useMutation({
    mutationFn: async () =>
      unwrap(await api.PATCH("/v1/me", { body: { name: name.trim() || null, time_zone: zone } })),
    onSuccess: (updated) => queries.setQueryData(meKey, updated),
  });
  const signOut = useMutation({
    mutationFn: async () => {
      const result = await api.POST("/v1/auth/sign-out");
      if (!result.response.ok && result.response.status !== 401) unwrap(result);
    },
    onSuccess: () => {
      setCsrfToken(null);
      queries.clear();
      queries.setQueryData(meKey, null);
      navigate("/sign-in", { replace: true });
    },
  });
  return (
    <div className="stack">
      <section className="panel">
        <h2>You</h2>
        <p>
          Signed in as <strong>{me.email}</strong>
        </p>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            save.mutate();
          }}
        >
          <Field label="Name">{(id) => <input id={id} value={name} onChange={(e) => setName(e.target.value)} />}</Field>
          <Field label="Time zone" hint="Digests arrive at 08:00 in it.">
            {(id) => (
              <select id={id} value={zone} onChange={(e) => setZone(e.target.value)}>
                {!zones().includes(zone) && <option value={zone}>{zone}</option>}
                {zones().map((z) => (
                  <option key={z} value={z}>
                    {z}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <ErrorNote error={save.error} />
          {save.isSuccess && <p role="status">Saved.</p>}
          <button type="submit" className="primary" disabled={save.isPending}>
            Save
          </button>
        </form>
      </section>
      <section className="panel">
        <h2>Organizations</h2>
        <ul>
          {me.organizations.map((o) => (
            <li key={o.slug}>
              <Link href={`/orgs/${o.slug}/hosts`}>{o.name}</Link> <span className="muted">({o.role}, {o.plan})</span>
            </li>
          ))}
        </ul>
        {me.organizations.length === 0 && <p className="muted">You belong to no organization.</p>}
      </section>
      <section className="panel">
        <h2>Sign out</h2>
        <ErrorNote error={signOut.error} />
        <button type="button" onClick={() => signOut.mutate()} disabled={signOut.isPending}>
          Sign out
        </button>
      </section>
    </div>
  );
}
