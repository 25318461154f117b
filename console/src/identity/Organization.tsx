// The organization itself: its name, slug and plan, the caller's role, and its settings. The
// reboot budget (decisions §20): at most this many hosts reboot at once; admins change it.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useState } from "react";
import { api, unwrap } from "../api/client";
import { useRights } from "../api/session";
import { ErrorNote, Field, Loaded, PageTitle, When } from "../ui/kit";

export function OrganizationPage({ org }: { org: string }) {
  const rights = useRights(org);
  const queries = useQueryClient();
  const organization = useQuery({
    queryKey: ["organization", org],
    queryFn: async () => unwrap(await api.GET("/v1/orgs/{org}", { params: { path: { org } } })),
  });
  const [limited, setLimited] = useState(false);
  const [budget, setBudget] = useState(2);
  const [saved, setSaved] = useState(false);
  const stored = organization.data?.max_concurrent_reboots;
  useEffect(() => {
    if (organization.data) {
      setLimited(stored !== null && stored !== undefined);
      setBudget(stored ?? 2);
    }
  }, [organization.data, stored]);
  const save = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.PATCH("/v1/orgs/{org}", {
          params: { path: { org } },
          body: { max_concurrent_reboots: limited ? budget : null },
        }),
      ),
    onSuccess: (changed) => {
      queries.setQueryData(["organization", org], changed);
      setSaved(true);
    },
  });
  return (
    <>
      <PageTitle>Organization</PageTitle>
      <Loaded query={organization}>
        {(o) => (
          <div className="grid2">
            <section className="panel" aria-labelledby="about-org">
              <h2 id="about-org">{o.name}</h2>
              <dl className="facts">
                <div>
                  <dt>Address in paths</dt>
                  <dd>
                    <code>{o.slug}</code>
                  </dd>
                </div>
                <div>
                  <dt>Plan</dt>
                  <dd>{o.plan}</dd>
                </div>
                <div>
                  <dt>Your role</dt>
                  <dd>{o.role}</dd>
                </div>
                <div>
                  <dt>Single sign-on</dt>
                  <dd>{o.sso_enforced ? "required" : "optional"}</dd>
                </div>
                <div>
                  <dt>Created</dt>
                  <dd>
                    <When at={o.created_at} />
                  </dd>
                </div>
              </dl>
            </section>
            <form
              className="panel"
              aria-labelledby="reboot-budget"
              onSubmit={(e) => {
                e.preventDefault();
                setSaved(false);
                save.mutate();
              }}
            >
              <h2 id="reboot-budget">Reboot budget</h2>
              <p data-testid="reboot-budget">
                {o.max_concurrent_reboots === null || o.max_concurrent_reboots === undefined
                  ? "No limit: any number of hosts may reboot at once."
                  : `At most ${o.max_concurrent_reboots} host${o.max_concurrent_reboots === 1 ? "" : "s"} reboot at once.`}
              </p>
              <p className="hint">
                A job that may reboot goes out only while fewer hosts are rebooting (from the job handed out until the host checks in
                after its result, at most 30 minutes). A host over the budget installs at once and reboots later, in a job of its own,
                when a slot frees.
              </p>
              <fieldset disabled={!rights.manage}>
                <legend className="sr-only">Change the reboot budget</legend>
                <label className="check">
                  <input type="checkbox" checked={limited} onChange={(e) => setLimited(e.target.checked)} />
                  Limit how many hosts reboot at once
                </label>
                {limited && (
                  <Field label="Hosts rebooting at once, at most">
                    {(id) => (
                      <input
                        id={id}
                        type="number"
                        min={1}
                        max={1000000}
                        required
                        value={budget}
                        onChange={(e) => setBudget(Number(e.target.value))}
                      />
                    )}
                  </Field>
                )}
                {rights.manage && (
                  <button type="submit" className="primary" disabled={save.isPending}>
                    Save reboot budget
                  </button>
                )}
              </fieldset>
              {!rights.manage && <p className="muted small">Admins change it.</p>}
              {saved && <p role="status">Saved.</p>}
              <ErrorNote error={save.error} />
            </form>
          </div>
        )}
      </Loaded>
    </>
  );
}
