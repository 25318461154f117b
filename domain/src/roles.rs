//! A member's role in an organization (decisions §4): stored in `memberships.role` and
//! `invitations.role`, ordered by power. Which role may do what is the api's (its access
//! extractor and the OpenAPI document state it).

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
}
