//! A member's role in an organization (decisions §4): stored in `memberships.role` and
//! `invitations.role`, ordered by power; and the permission matrix, which role has which right.
//! How an operation declares the right it needs (and the OpenAPI document states it) is the
//! api's (`api::http::rights`).

use std::{fmt, str::FromStr};

/// A member's role in an organization, from most to least powerful.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Owner,
    Admin,
    Operator,
    Viewer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Owner, Role::Admin, Role::Operator, Role::Viewer];

    fn rank(self) -> u8 {
        match self {
            Role::Owner => 3,
            Role::Admin => 2,
            Role::Operator => 1,
            Role::Viewer => 0,
        }
    }

    /// Whether this role has at least the powers of `other`.
    pub fn at_least(self, other: Role) -> bool {
        self.rank() >= other.rank()
    }

    /// The less powerful of two roles.
    pub fn min(self, other: Role) -> Role {
        if self.at_least(other) { other } else { self }
    }

    /// The role a stored `memberships.role` or `invitations.role` names; `None` for a value
    /// this build does not know (it then has no role's powers).
    pub fn stored(value: &str) -> Option<Role> {
        value.parse().ok()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "owner" => Ok(Role::Owner),
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            "viewer" => Ok(Role::Viewer),
            _ => Err(()),
        }
    }
}

/// The role single sign-on or SCIM gives (never owner).
impl From<crate::sso::SsoRole> for Role {
    fn from(role: crate::sso::SsoRole) -> Self {
        match role {
            crate::sso::SsoRole::Admin => Role::Admin,
            crate::sso::SsoRole::Operator => Role::Operator,
            crate::sso::SsoRole::Viewer => Role::Viewer,
        }
    }
}

/// The rows of the permission matrix of decisions §4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Right {
    /// Read hosts, groups, proposals, policies.
    ReadFleet,
    /// Read and write comments; read agent releases.
    Discuss,
    /// Approve, reject, snooze proposals; edit hosts; manage groups.
    Operate,
    /// Manage enrollment tokens and policies; read and manage notification channels.
    Manage,
    /// Members, invitations, API tokens, the audit log.
    Administer,
    /// The SSO connection, its domain claims and the SCIM token: whoever configures the
    /// identity provider can sign in as anyone at the verified domains, owners included
    /// (decisions §18).
    IdentityProvider,
    /// Billing, billing usage, plan changes, deleting the organization.
    Billing,
    /// Halt and resume a rollout (decisions §20).
    Rollouts,
    /// The organization's settings (`max_concurrent_reboots`, decisions §20).
    OrgSettings,
    /// One's own digest setting.
    OwnSettings,
}

impl Right {
    /// Whether `role` has this right.
    pub fn allowed_to(self, role: Role) -> bool {
        role.at_least(self.minimum_role())
    }

    pub fn minimum_role(self) -> Role {
        match self {
            Right::ReadFleet | Right::OwnSettings => Role::Viewer,
            Right::Discuss | Right::Operate | Right::Rollouts => Role::Operator,
            Right::Manage | Right::Administer | Right::OrgSettings => Role::Admin,
            Right::IdentityProvider | Right::Billing => Role::Owner,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_order() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!("root".parse::<Role>().is_err());
        assert!(Role::Owner.at_least(Role::Admin));
        assert!(!Role::Viewer.at_least(Role::Operator));
        assert_eq!(Role::Admin.min(Role::Operator), Role::Operator);
    }

    /// Decisions §4, row by row: (right, owner, admin, operator, viewer).
    const MATRIX: [(Right, [bool; 4]); 10] = [
        (Right::ReadFleet, [true, true, true, true]),
        (Right::Discuss, [true, true, true, false]),
        (Right::Operate, [true, true, true, false]),
        (Right::Manage, [true, true, false, false]),
        (Right::Administer, [true, true, false, false]),
        (Right::IdentityProvider, [true, false, false, false]),
        (Right::Billing, [true, false, false, false]),
        (Right::Rollouts, [true, true, true, false]),
        (Right::OrgSettings, [true, true, false, false]),
        (Right::OwnSettings, [true, true, true, true]),
    ];

    #[test]
    fn the_permission_matrix_is_decisions_section_4() {
        for (right, allowed) in MATRIX {
            for (role, expected) in Role::ALL.into_iter().zip(allowed) {
                assert_eq!(right.allowed_to(role), expected, "{role} on {right:?}");
            }
        }
    }
}
