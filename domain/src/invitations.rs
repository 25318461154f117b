//! Invitations, whoever sends them (a member, or SCIM provisioning a person).

use chrono::Duration;

/// How long an invitation's link can be accepted.
pub const INVITATION_TTL: Duration = Duration::days(7);
