//! A member's own digest setting in an organization: how often the digest email comes (off,
//! daily or weekly; 08:00 in the member's time zone, weekly on Mondays) and whether they are
//! emailed when mentioned in a comment. Every member reads and sets only their own.

use domain::notifications::digest::Frequency;
use entities::digest_settings;
use poem_openapi::{Enum, Object, OpenApi, payload::Json};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Set, sea_query::OnConflict};

use crate::{
    AppState,
    http::access::org,
    http::error::{OrgInputErrors, OrgReadErrors},
    http::rights::OwnSettings,
    http::tags::Tag,
};

/// How often the digest comes.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "lowercase")]
pub enum DigestFrequency {
    Off,
    Daily,
    Weekly,
}

impl From<DigestFrequency> for Frequency {
    fn from(f: DigestFrequency) -> Self {
        match f {
            DigestFrequency::Off => Frequency::Off,
            DigestFrequency::Daily => Frequency::Daily,
            DigestFrequency::Weekly => Frequency::Weekly,
        }
    }
}

fn frequency_of(stored: &str) -> DigestFrequency {
    match Frequency::parse(stored) {
        Some(Frequency::Daily) => DigestFrequency::Daily,
        Some(Frequency::Weekly) => DigestFrequency::Weekly,
        _ => DigestFrequency::Off,
    }
}

/// The digest setting as set.
#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct DigestSettingInput {
    /// off, daily or weekly. Sent at 08:00 in the member's time zone (their profile's); weekly
    /// on Mondays. A digest with nothing to say is not sent.
    pub frequency: DigestFrequency,
    /// Whether the member is emailed when mentioned in a comment here. Absent or null leaves
    /// it as it is (on until turned off).
    pub mention_email: Option<bool>,
}

/// A member's digest setting.
#[derive(Object)]
pub struct DigestSetting {
    /// off (the default), daily or weekly. Sent at 08:00 in the member's time zone; weekly on
    /// Mondays. A digest with nothing to say is not sent.
    pub frequency: DigestFrequency,
    /// Whether the member is emailed when mentioned in a comment in this organization. On
    /// unless turned off.
    pub mention_email: bool,
}

fn view(row: Option<&digest_settings::Model>) -> DigestSetting {
    match row {
        Some(row) => DigestSetting {
            frequency: frequency_of(&row.frequency),
            mention_email: row.mention_email,
        },
        None => DigestSetting {
            frequency: DigestFrequency::Off,
            mention_email: true,
        },
    }
}

pub struct DigestApi;

#[OpenApi(tag = "Tag::Notifications")]
impl DigestApi {
    /// The caller's own digest setting in this organization (off and mention emails on until
    /// set).
    #[oai(
        path = "/v1/orgs/:org/digest",
        method = "get",
        operation_id = "getDigest"
    )]
    async fn get(
        &self,
        org: org::Path<OwnSettings>,
        state: poem::web::Data<&AppState>,
    ) -> Result<Json<DigestSetting>, OrgReadErrors> {
        let row = org
            .scope()
            .rows::<digest_settings::Entity>()
            .filter(digest_settings::Column::AccountId.eq(org.caller.account_id()))
            .one(&state.db.orm)
            .await?;
        Ok(Json(view(row.as_ref())))
    }

    /// Set the caller's own digest setting in this organization. 400 `invalid-request` for a
    /// frequency other than off, daily or weekly. `mention_email` absent leaves it unchanged.
    #[oai(
        path = "/v1/orgs/:org/digest",
        method = "put",
        operation_id = "putDigest"
    )]
    async fn put(
        &self,
        org: org::Path<OwnSettings>,
        state: poem::web::Data<&AppState>,
        body: Json<DigestSettingInput>,
    ) -> Result<Json<DigestSetting>, OrgInputErrors> {
        let now = state.clock.now();
        let frequency = Frequency::from(body.frequency);
        let mut update = vec![
            digest_settings::Column::Frequency,
            digest_settings::Column::UpdatedAt,
        ];
        if body.mention_email.is_some() {
            update.push(digest_settings::Column::MentionEmail);
        }
        let row = digest_settings::ActiveModel {
            org_id: Set(org.org_id()),
            account_id: Set(org.caller.account_id()),
            frequency: Set(frequency.as_str().to_owned()),
            mention_email: Set(body.mention_email.unwrap_or(true)),
            last_sent_key: Set(None),
            last_sent_at: Set(None),
            updated_at: Set(now),
        };
        digest_settings::Entity::insert(row)
            .on_conflict(
                OnConflict::columns([
                    digest_settings::Column::OrgId,
                    digest_settings::Column::AccountId,
                ])
                .update_columns(update)
                .to_owned(),
            )
            .exec_without_returning(&state.db.orm)
            .await?;
        let row = org
            .scope()
            .rows::<digest_settings::Entity>()
            .filter(digest_settings::Column::AccountId.eq(org.caller.account_id()))
            .one(&state.db.orm)
            .await?;
        Ok(Json(view(row.as_ref())))
    }
}
