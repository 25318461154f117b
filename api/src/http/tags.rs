//! OpenAPI tags: one per feature area.

use poem_openapi::Tags;

#[derive(Tags)]
pub enum Tag {
    /// Liveness and readiness of the service.
    Operations,
    /// Sign-up, sign-in by emailed link, sessions.
    Auth,
    /// The signed-in person.
    Me,
    /// Organizations the caller belongs to.
    Organizations,
    /// Members of an organization and their roles.
    Members,
    /// Invitations to join an organization.
    Invitations,
    /// API tokens for automation.
    ApiTokens,
    /// The organization's audit log.
    Audit,
    /// Tokens that admit hosts to the organization.
    EnrollmentTokens,
    /// The fleet's hosts.
    Hosts,
    /// Groups of hosts: static and label-selected members.
    Groups,
    /// Update policies: scope, approvals, maintenance windows.
    Policies,
    /// Update proposals and the decisions on them.
    Proposals,
    /// The discussion on a proposal.
    Comments,
    /// Notification channels, their delivery logs, and each member's digest setting.
    Notifications,
    /// The agent protocol: enrolment, signed check-ins, certificate renewal.
    Agent,
    /// Plans, billing and usage; the payment processor's webhook.
    Billing,
    /// Single sign-on: the OpenID Connect connection, domain claims, sign-in through the
    /// identity provider.
    Sso,
    /// SCIM provisioning: the organization's token, and the SCIM 2.0 protocol (RFC 7643/7644) an
    /// identity provider speaks at `/scim/v2` (media type `application/scim+json`, SCIM's own
    /// error schema instead of problem+json).
    Scim,
}
