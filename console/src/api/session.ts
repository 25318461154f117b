// Who is signed in, and their organizations: `GET /v1/me`, cached, with its CSRF token kept
// for mutations. Pages ask `useOrgRole` what the caller may do, so that controls a role lacks
// (approving for a viewer, say) are not shown at all.
import { useQuery } from "@tanstack/react-query";
import { api, setCsrfToken, unwrap, type Schemas } from "./client";

export type Me = Schemas["Me"];
export type Role = "owner" | "admin" | "operator" | "viewer";

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2, owner: 3 };

export const meKey = ["me"] as const;

export async function fetchMe(): Promise<Me | null> {
  const result = await api.GET("/v1/me");
  if (result.response.status === 401) {
    setCsrfToken(null);
    return null;
  }
  const me = unwrap(result);
  setCsrfToken(me.csrf_token);
  return me;
}

export function useMe() {
  return useQuery({ queryKey: meKey, queryFn: fetchMe, staleTime: 60_000 });
}

/** Whether `role` has at least the powers of `needed`. */
export function atLeast(role: string | undefined, needed: Role): boolean {
  if (!role || !(role in RANK)) return false;
  return RANK[role as Role] >= RANK[needed];
}

/** The caller's role in organization `slug` (undefined while loading or when not a member). */
export function useOrgRole(slug: string): string | undefined {
  const me = useMe();
  return me.data?.organizations.find((o) => o.slug === slug)?.role;
}

/** What the permission matrix (decisions §4) lets the caller do in an organization. */
export function useRights(slug: string) {
  const role = useOrgRole(slug);
  return {
    role,
    discuss: atLeast(role, "operator"),
    operate: atLeast(role, "operator"),
    manage: atLeast(role, "admin"),
    administer: atLeast(role, "admin"),
    owner: atLeast(role, "owner"),
  };
}
