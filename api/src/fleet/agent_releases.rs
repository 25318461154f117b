//! Agent release channels as the manifest last stated them (decisions §11, §16): the same for
//! every organization, read by operators and above.

use chrono::{DateTime, Utc};
use entities::agent_releases;
use poem_openapi::{Object, OpenApi, payload::Json};

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgReadErrors},
    http::rights::Discuss,
    http::tags::Tag,
};
use entities::scope::Untenanted;

/// An agent release channel.
#[derive(Object)]
pub struct AgentRelease {
    /// stable or beta.
    pub channel: String,
    /// Build held by the channel, comparable with a host's `agent_version` (semantic version).
    pub version: String,
    #[oai(skip_serializing_if_is_none)]
    pub released_at: Option<DateTime<Utc>>,
    /// When the manifest was last read.
    pub seen_at: DateTime<Utc>,
}

/// The stored channels, stable first.
pub async fn channels<C: sea_orm::ConnectionTrait>(
    db: &C,
) -> Result<Vec<agent_releases::Model>, sea_orm::DbErr> {
    let mut rows = agent_releases::Entity::rows().all(db).await?;
    domain::intel::releases::stable_first(&mut rows);
    Ok(rows)
}

pub struct AgentReleasesApi;

#[OpenApi(tag = "Tag::Hosts")]
impl AgentReleasesApi {
    /// The agent release channels, stable first.
    ///
    /// Read from `AGENT_MANIFEST_URL` at start and hourly; empty until a manifest has been
    /// read (and when none is configured). A manifest that cannot be read leaves the channels
    /// as they were. The channels are the same for every organization.
    #[oai(
        path = "/v1/orgs/:org/agent-releases",
        method = "get",
        operation_id = "listAgentReleases"
    )]
    async fn list(
        &self,
        org: org::Path<Discuss>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<Vec<AgentRelease>>, OrgReadErrors> {
        // The channels are the same for every organization: the caller's only decides access.
        let _ = org.org_id();
        let rows = channels(&state.db.orm).await.map_err(ApiError::from)?;
        Ok(Json(
            rows.into_iter()
                .map(|r| AgentRelease {
                    channel: r.channel,
                    version: r.version,
                    released_at: r.released_at,
                    seen_at: r.seen_at,
                })
                .collect(),
        ))
    }
}
