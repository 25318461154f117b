//! What an operation requires of its caller, as the access extractor enforces it and the OpenAPI
//! document states it: a right of the permission matrix (decisions §4, `domain::roles`) and
//! whether an API token may call it.

pub use domain::roles::{Right, Role};

/// What an organization-scoped operation requires: a right, and whether API tokens may call it
/// (decisions §3: never billing, SSO, the SCIM token, creating or revoking API tokens,
/// invitations or member changes — those need a person, so that a leaked token can neither
/// mint a lasting one nor bring somebody in).
pub trait Requirement: Send + Sync + 'static {
    const RIGHT: Right;
    const API_TOKENS: bool = true;
    /// The description of the operation's `org` parameter, stating the requirement.
    const DOC: &'static str;
}

macro_rules! requirement {
    ($(#[$meta:meta])* $name:ident, $right:expr, $tokens:expr, $doc:literal) => {
        $(#[$meta])*
        pub struct $name;
        impl Requirement for $name {
            const RIGHT: Right = $right;
            const API_TOKENS: bool = $tokens;
            const DOC: &'static str = $doc;
        }
    };
}

requirement!(
    /// Read hosts, groups, proposals, policies: every member.
    ReadFleet, Right::ReadFleet, true,
    "The organization's slug. Requires role `viewer` or above."
);
requirement!(
    /// Comments and agent releases: operator and above.
    Discuss, Right::Discuss, true,
    "The organization's slug. Requires role `operator` or above."
);
requirement!(
    /// Decide proposals, edit hosts, manage groups: operator and above.
    Operate, Right::Operate, true,
    "The organization's slug. Requires role `operator` or above."
);
requirement!(
    /// Halt and resume a rollout: operator and above.
    Rollouts, Right::Rollouts, true,
    "The organization's slug. Requires role `operator` or above."
);
requirement!(
    /// The organization's settings: admin and above.
    OrgSettings, Right::OrgSettings, true,
    "The organization's slug. Requires role `admin` or above."
);
requirement!(
    /// Enrollment tokens, policies, notification channels: admin and above.
    Manage, Right::Manage, true,
    "The organization's slug. Requires role `admin` or above."
);
requirement!(
    /// Members, invitations, API tokens, the audit log: admin and above.
    Administer, Right::Administer, true,
    "The organization's slug. Requires role `admin` or above."
);
requirement!(
    /// Creating and revoking API tokens, invitations and member changes: admin and above, in
    /// person (a session); never with an API token.
    AdministerInPerson, Right::Administer, false,
    "The organization's slug. Requires role `admin` or above. API tokens are refused: a person must be signed in."
);
requirement!(
    /// The SSO connection, domain claims and the SCIM token: the owner only, in person
    /// (decisions §4, §18).
    IdentityProviderInPerson, Right::IdentityProvider, false,
    "The organization's slug. Requires role `owner`: whoever configures the identity provider can sign in as anyone at the verified domains, owners included. API tokens are refused: a person must be signed in."
);
requirement!(
    /// Leaving (removing oneself): every member, in person. Removing anybody else needs admin,
    /// checked by the operation.
    MemberInPerson, Right::OwnSettings, false,
    "The organization's slug. Requires role `admin` or above to remove another member; any member (`viewer` or above) may remove themselves, that is leave. API tokens are refused: a person must be signed in."
);
requirement!(
    /// Billing: the owner only, never with an API token.
    Billing, Right::Billing, false,
    "The organization's slug. Requires role `owner` or above. API tokens are refused."
);
requirement!(
    /// One's own settings in the organization: every member.
    OwnSettings, Right::OwnSettings, true,
    "The organization's slug. Requires role `viewer` or above."
);
