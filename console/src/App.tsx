// Routes and the frame around every page: the navigation of the organization's domains, the
// organization switcher, the account menu, and two notices (a rate-limit wait, a session that
// ended). Pages live by domain, as the API's tags do: identity/, fleet/, proposals/,
// notifications/, billing/.
import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useState, type ReactNode } from "react";
import { Link, Redirect, Route, Switch, useLocation, useRoute } from "wouter";
import { onRateLimitWait, onUnauthenticated } from "./api/client";
import { useMe, useRights } from "./api/session";
import { BillingPage } from "./billing/Billing";
import { EnrollmentTokensPage } from "./fleet/EnrollmentTokens";
import { GroupDetailPage, GroupsPage } from "./fleet/Groups";
import { HostDetailPage } from "./fleet/HostDetail";
import { HostsPage } from "./fleet/Hosts";
import { ApiTokensPage } from "./identity/ApiTokens";
import { AuditPage } from "./identity/Audit";
import { AcceptInvitationPage, SignInPage, SignUpPage, VerifyPage } from "./identity/Auth";
import { MembersPage } from "./identity/Members";
import { OrganizationPage } from "./identity/Organization";
import { ProfilePage } from "./identity/Profile";
import { SsoPage } from "./identity/Sso";
import { ChannelDetailPage, NotificationsPage } from "./notifications/Channels";
import { PoliciesPage, PolicyEditPage } from "./proposals/Policies";
import { ProposalDetailPage } from "./proposals/ProposalDetail";
import { ProposalsPage } from "./proposals/Proposals";
import { Loading } from "./ui/kit";

/** Where to come back to after signing in again. */
export function currentPath(): string {
  return window.location.pathname + window.location.search;
}

function SessionWatch() {
  const [, navigate] = useLocation();
  const queries = useQueryClient();
  useEffect(
    () =>
      onUnauthenticated(() => {
        const here = currentPath();
        // Only a session that was there has ended; without one, pages send to sign-in anyway.
        if (!queries.getQueryData(["me"])) return;
        if (window.location.pathname.startsWith("/sign-in")) return;
        queries.setQueryData(["me"], null);
        navigate(`/sign-in?expired=1&next=${encodeURIComponent(here)}`, { replace: true });
      }),
    [navigate, queries],
  );
  return null;
}

function RateLimitNotice() {
  const [seconds, setSeconds] = useState<number | null>(null);
  useEffect(() => onRateLimitWait(setSeconds), []);
  if (seconds === null) return null;
  return (
    <div className="toast" role="status" aria-live="polite">
      Too many requests: trying again in {Math.ceil(seconds)} s.
    </div>
  );
}

const ORG_NAV: { path: string; label: string; need?: "operate" | "manage" | "administer" | "owner" }[] = [
  { path: "hosts", label: "Hosts" },
  { path: "groups", label: "Groups" },
  { path: "proposals", label: "Proposals" },
  { path: "policies", label: "Policies" },
  { path: "enrollment-tokens", label: "Enrolment", need: "manage" },
  { path: "notifications", label: "Notifications" },
  { path: "settings", label: "Organization" },
  { path: "members", label: "Members", need: "administer" },
  { path: "api-tokens", label: "API tokens", need: "administer" },
  { path: "audit", label: "Audit log", need: "administer" },
  { path: "sso", label: "SSO & SCIM", need: "owner" },
  { path: "billing", label: "Billing", need: "owner" },
];

function OrgSwitcher({ org }: { org: string }) {
  const me = useMe();
  const [location, navigate] = useLocation();
  const orgs = me.data?.organizations ?? [];
  if (orgs.length < 2) return <span className="org-name">{orgs[0]?.name ?? org}</span>;
  return (
    <label className="org-switch">
      <span className="sr-only">Organization</span>
      <select
        value={org}
        onChange={(e) => {
          const rest = location.split("/")[3] ?? "hosts";
          navigate(`/orgs/${e.target.value}/${rest}`);
        }}
      >
        {orgs.map((o) => (
          <option key={o.slug} value={o.slug}>
            {o.name}
          </option>
        ))}
      </select>
    </label>
  );
}

function Frame({ org, children }: { org?: string; children: ReactNode }) {
  const me = useMe();
  const rights = useRights(org ?? "");
  const [location] = useLocation();
  const [menuOpen, setMenuOpen] = useState(false);
  useEffect(() => setMenuOpen(false), [location]);
  return (
    <div className="frame">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <Link href="/" className="brand">
          Fleet updates
        </Link>
        {org && <OrgSwitcher org={org} />}
        <button
          type="button"
          className="menu-toggle"
          aria-expanded={menuOpen}
          aria-controls="nav"
          onClick={() => setMenuOpen((o) => !o)}
        >
          Menu
        </button>
        <span className="spacer" />
        {me.data && (
          <Link href="/profile" className="account">
            {me.data.name ?? me.data.email}
          </Link>
        )}
      </header>
      {org && (
        <nav id="nav" className={`side ${menuOpen ? "open" : ""}`} aria-label="Organization">
          <ul>
            {ORG_NAV.filter((item) => !item.need || rights[item.need]).map((item) => {
              const href = `/orgs/${org}/${item.path}`;
              const current = location === href || location.startsWith(`${href}/`);
              return (
                <li key={item.path}>
                  <Link href={href} aria-current={current ? "page" : undefined}>
                    {item.label}
                  </Link>
                </li>
              );
            })}
          </ul>
        </nav>
      )}
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </div>
  );
}

/** Pages that need a session: sign-in first, then back here. */
function SignedIn({ children }: { children: (me: NonNullable<ReturnType<typeof useMe>["data"]>) => ReactNode }) {
  const me = useMe();
  if (me.isPending) return <Loading />;
  if (!me.data) return <Redirect to={`/sign-in?next=${encodeURIComponent(currentPath())}`} replace />;
  return <>{children(me.data)}</>;
}

function Home() {
  return (
    <SignedIn>
      {(me) => {
        const first = me.organizations[0];
        if (!first) return <Redirect to="/profile" replace />;
        return <Redirect to={`/orgs/${first.slug}/hosts`} replace />;
      }}
    </SignedIn>
  );
}

function OrgPages() {
  const [, params] = useRoute<{ org: string; rest?: string }>("/orgs/:org/*?");
  const org = params?.org ?? "";
  return (
    <SignedIn>
      {(me) =>
        !me.organizations.some((o) => o.slug === org) ? (
          <Frame>
            <p className="error" role="alert">
              No organization “{org}” of yours. <Link href="/">Go to yours</Link>.
            </p>
          </Frame>
        ) : (
          <Frame org={org}>
            <Switch>
              <Route path="/orgs/:org/hosts">{() => <HostsPage org={org} />}</Route>
              <Route path="/orgs/:org/hosts/:id">{(p) => <HostDetailPage org={org} id={p.id} />}</Route>
              <Route path="/orgs/:org/groups">{() => <GroupsPage org={org} />}</Route>
              <Route path="/orgs/:org/groups/:id">{(p) => <GroupDetailPage org={org} id={p.id} />}</Route>
              <Route path="/orgs/:org/enrollment-tokens">{() => <EnrollmentTokensPage org={org} />}</Route>
              <Route path="/orgs/:org/proposals">{() => <ProposalsPage org={org} />}</Route>
              <Route path="/orgs/:org/proposals/:id">
                {(p) => <ProposalDetailPage org={org} id={p.id} />}
              </Route>
              <Route path="/orgs/:org/policies">{() => <PoliciesPage org={org} />}</Route>
              <Route path="/orgs/:org/policies/new">{() => <PolicyEditPage org={org} />}</Route>
              <Route path="/orgs/:org/policies/:id">{(p) => <PolicyEditPage org={org} id={p.id} />}</Route>
              <Route path="/orgs/:org/notifications">{() => <NotificationsPage org={org} />}</Route>
              <Route path="/orgs/:org/notifications/:id">
                {(p) => <ChannelDetailPage org={org} id={p.id} />}
              </Route>
              <Route path="/orgs/:org/members">{() => <MembersPage org={org} />}</Route>
              <Route path="/orgs/:org/settings">{() => <OrganizationPage org={org} />}</Route>
              <Route path="/orgs/:org/api-tokens">{() => <ApiTokensPage org={org} />}</Route>
              <Route path="/orgs/:org/audit">{() => <AuditPage org={org} />}</Route>
              <Route path="/orgs/:org/sso">{() => <SsoPage org={org} />}</Route>
              <Route path="/orgs/:org/billing">{() => <BillingPage org={org} />}</Route>
              <Route>
                <Redirect to={`/orgs/${org}/hosts`} replace />
              </Route>
            </Switch>
          </Frame>
        )
      }
    </SignedIn>
  );
}

export function App() {
  return (
    <>
      <SessionWatch />
      <RateLimitNotice />
      <Switch>
        <Route path="/">{() => <Home />}</Route>
        <Route path="/sign-in">{() => <SignInPage />}</Route>
        <Route path="/sign-up">{() => <SignUpPage />}</Route>
        <Route path="/sign-in/verify">{() => <VerifyPage kind="sign-in" />}</Route>
        <Route path="/sign-up/verify">{() => <VerifyPage kind="sign-up" />}</Route>
        <Route path="/invitations/accept">{() => <AcceptInvitationPage />}</Route>
        <Route path="/profile">
          {() => (
            <SignedIn>
              {() => (
                <Frame>
                  <ProfilePage />
                </Frame>
              )}
            </SignedIn>
          )}
        </Route>
        <Route path="/orgs/:org/*?">{() => <OrgPages />}</Route>
        <Route>
          <Frame>
            <h1>Not found</h1>
            <p>
              Nothing lives at this address. <Link href="/">Go to the fleet</Link>.
            </p>
          </Frame>
        </Route>
      </Switch>
    </>
  );
}
