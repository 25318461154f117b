//! A host's inventory for members (decisions §22): the packages its agent last reported
//! installed, and the updates it last reported available with their advisories. Both are
//! paged (decisions §5) in name order; a page's cursor is the last row's `(name, arch)` (as
//! hex, so that every string of the documented pattern is a position to continue after), and
//! a page is an index range scan however many packages a host has.

use std::collections::HashSet;

use entities::{host_packages, host_updates, hosts, json::Advisory, known_exploited};
use platform::ids::HostId;
use poem_openapi::{Object, OpenApi, param::Path, param::Query, payload::Json};
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select};
use uuid::Uuid;

use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgInputErrors},
    http::paging::Page,
    http::rights::ReadFleet,
    http::tags::Tag,
    proposals::api::AdvisoryView,
};
use entities::scope::{OrgScope, Untenanted};

/// A package installed on a host.
#[derive(Object)]
#[oai(rename = "InstalledPackage")]
pub struct InstalledPackage {
    pub name: String,
    pub arch: String,
    pub version: String,
    /// The source package it was built from, when the agent said.
    #[oai(nullable)]
    pub source_name: Option<String>,
    #[oai(nullable)]
    pub source_version: Option<String>,
}

/// An update available to a host, as its agent last reported it.
#[derive(Object)]
#[oai(rename = "PendingUpdate")]
pub struct PendingUpdate {
    pub name: String,
    pub arch: String,
    /// deb, rpm, apk or pacman.
    pub ecosystem: String,
    /// The version installed now.
    pub from_version: String,
    /// The version the package manager offers.
    pub to_version: String,
    #[oai(nullable)]
    pub source_name: Option<String>,
    /// Every advisory the update fixes, or the agent said it comes from a security source.
    pub security: bool,
    /// Installing it leaves the host needing a reboot.
    pub requires_reboot: bool,
    /// The advisories it fixes; `known_exploited` marks those listing a CVE on the public
    /// known-exploited catalogue.
    pub advisories: Vec<AdvisoryView>,
}

/// `limit` and `cursor` of these lists, checked.
struct NamePaging {
    limit: u32,
    after: Option<(String, String)>,
}

impl NamePaging {
    fn new(limit: Option<u32>, cursor: Option<&str>) -> Result<Self, ApiError> {
        Ok(NamePaging {
            limit: crate::http::paging::checked_limit(limit)?,
            after: crate::http::paging::checked_cursor(cursor, decode_cursor)?,
        })
    }

    /// `query` in `(name, arch)` order from after the cursor, one row more than a page.
    fn apply<E, N, A>(&self, query: Select<E>, name: N, arch: A) -> Select<E>
    where
        E: EntityTrait,
        N: ColumnTrait,
        A: ColumnTrait,
    {
        let query = match &self.after {
            None => query,
            Some((last_name, last_arch)) => query.filter(
                Condition::any().add(name.gt(last_name.as_str())).add(
                    Condition::all()
                        .add(name.eq(last_name.as_str()))
                        .add(arch.gt(last_arch.as_str())),
                ),
            ),
        };
        query
            .order_by_asc(name)
            .order_by_asc(arch)
            .limit(u64::from(self.limit) + 1)
    }

    /// The page of `rows`: at most `limit`, and the cursor after the last when more exist.
    fn cut<R>(
        &self,
        mut rows: Vec<R>,
        key: impl Fn(&R) -> (&str, &str),
    ) -> (Vec<R>, Option<String>) {
        let more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        let next = rows.last().filter(|_| more).map(|last| {
            let (name, arch) = key(last);
            encode_cursor(name, arch)
        });
        (rows, next)
    }
}

fn encode_cursor(name: &str, arch: &str) -> String {
    format!("{name}\0{arch}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The position a cursor names: pairs of lowercase hex digits (`None` otherwise), read as
/// text up to a NUL (the name) and after it (the architecture). A cursor this service did not
/// give out still names a position: the rows after it.
fn decode_cursor(text: &str) -> Option<(String, String)> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .filter(|pair| pair.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()?;
    let text = String::from_utf8_lossy(&bytes);
    let (name, arch) = text.split_once('\0').unwrap_or((&text, ""));
    Some((name.to_owned(), arch.to_owned()))
}

/// The host, when it is the organization's (404 otherwise).
async fn host_of(state: &AppState, scope: OrgScope, host_id: HostId) -> Result<Uuid, ApiError> {
    let host: hosts::Model = scope.get(&state.db.orm, host_id).await?;
    Ok(host.id)
}

/// `q` trimmed; none when blank.
fn search(q: Option<String>) -> Option<String> {
    q.map(|q| q.trim().to_owned()).filter(|q| !q.is_empty())
}

pub struct InventoryApi;

#[OpenApi(tag = "Tag::Hosts")]
impl InventoryApi {
    /// The packages installed on a host, as its agent last reported them, by name then
    /// architecture. `q` keeps those whose name contains it. Paged (`limit` 1–500, default
    /// 50; `cursor` the previous page's `next_cursor`). Empty until the agent has sent an
    /// inventory.
    #[oai(
        path = "/v1/orgs/:org/hosts/:host_id/packages",
        method = "get",
        operation_id = "listHostPackages"
    )]
    async fn packages(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The host's id (`hst_`).
        host_id: Path<HostId>,
        /// Only packages whose name contains this text.
        #[oai(validator(max_length = 255))]
        q: Query<Option<String>>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        #[oai(validator(pattern = "^([0-9a-f]{2}){0,1000}$"))]
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<InstalledPackage>>, OrgInputErrors> {
        let paging = NamePaging::new(limit.0, cursor.0.as_deref())?;
        let host = host_of(&state, org.scope(), *host_id).await?;
        let mut query =
            host_packages::Entity::rows().filter(host_packages::Column::HostId.eq(host));
        if let Some(q) = search(q.0) {
            query = query.filter(host_packages::Column::Name.contains(q.as_str()));
        }
        let rows = paging
            .apply(
                query,
                host_packages::Column::Name,
                host_packages::Column::Arch,
            )
            .all(&state.db.orm)
            .await?;
        let (rows, next_cursor) = paging.cut(rows, |p| (p.name.as_str(), p.arch.as_str()));
        Ok(Json(Page {
            items: rows
                .into_iter()
                .map(|p| InstalledPackage {
                    name: p.name,
                    arch: p.arch,
                    version: p.version,
                    source_name: p.source_name,
                    source_version: p.source_version,
                })
                .collect(),
            next_cursor,
        }))
    }

    /// The updates available to a host, as its agent last reported them, by name then
    /// architecture, each with the advisories it fixes and whether a CVE of theirs is known
    /// to be exploited. `security` keeps only security updates (or only others); `q` those
    /// whose name contains it. Paged like the package list. Empty until the agent has sent
    /// an inventory (the host's `updates` counts are null until then).
    #[oai(
        path = "/v1/orgs/:org/hosts/:host_id/updates",
        method = "get",
        operation_id = "listHostUpdates"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn updates(
        &self,
        org: org::Path<ReadFleet>,
        state: poem::web::Data<&AppState>,
        /// The host's id (`hst_`).
        host_id: Path<HostId>,
        /// Only security updates (`true`) or only the others (`false`).
        security: Query<Option<bool>>,
        /// Only updates whose package name contains this text.
        #[oai(validator(max_length = 255))]
        q: Query<Option<String>>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        #[oai(validator(pattern = "^([0-9a-f]{2}){0,1000}$"))]
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<PendingUpdate>>, OrgInputErrors> {
        let paging = NamePaging::new(limit.0, cursor.0.as_deref())?;
        let host = host_of(&state, org.scope(), *host_id).await?;
        let mut query = host_updates::Entity::rows().filter(host_updates::Column::HostId.eq(host));
        if let Some(flag) = security.0 {
            query = query.filter(host_updates::Column::Security.eq(flag));
        }
        if let Some(q) = search(q.0) {
            query = query.filter(host_updates::Column::Name.contains(q.as_str()));
        }
        let rows = paging
            .apply(
                query,
                host_updates::Column::Name,
                host_updates::Column::Arch,
            )
            .all(&state.db.orm)
            .await?;
        let (rows, next_cursor) = paging.cut(rows, |u| (u.name.as_str(), u.arch.as_str()));
        let advisories: Vec<Vec<Advisory>> = rows
            .iter()
            .map(|u| u.advisories.read())
            .collect::<Result<_, _>>()?;
        let cves: Vec<String> = advisories
            .iter()
            .flatten()
            .flat_map(|a| a.cves.iter().cloned())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut exploited = HashSet::new();
        for chunk in cves.chunks(500) {
            let found: Vec<String> = known_exploited::Entity::rows()
                .select_only()
                .column(known_exploited::Column::Cve)
                .filter(known_exploited::Column::Cve.is_in(chunk.to_vec()))
                .into_tuple()
                .all(&state.db.orm)
                .await?;
            exploited.extend(found);
        }
        Ok(Json(Page {
            items: rows
                .into_iter()
                .zip(advisories)
                .map(|(u, advisories)| PendingUpdate {
                    name: u.name,
                    arch: u.arch,
                    ecosystem: u.ecosystem,
                    from_version: u.from_version,
                    to_version: u.to_version,
                    source_name: u.source_name,
                    security: u.security,
                    requires_reboot: u.requires_reboot,
                    advisories: advisories
                        .into_iter()
                        .map(|a| AdvisoryView::new(a, &exploited))
                        .collect(),
                })
                .collect(),
            next_cursor,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_the_last_package_and_any_hex_is_a_position() {
        let cursor = encode_cursor("libssl3", "amd64");
        assert_eq!(cursor, "6c696273736c3300616d643634");
        assert_eq!(
            decode_cursor(&cursor),
            Some(("libssl3".to_owned(), "amd64".to_owned()))
        );
        assert_eq!(
            decode_cursor("6c69"),
            Some(("li".to_owned(), String::new())),
            "no separator: a name"
        );
        assert_eq!(
            decode_cursor("ff"),
            Some(("\u{fffd}".to_owned(), String::new()))
        );
        assert_eq!(decode_cursor("abc"), None);
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("+1"), None);
        assert!(NamePaging::new(Some(0), None).is_err());
        assert!(NamePaging::new(Some(501), None).is_err());
        assert!(NamePaging::new(None, Some("abc")).is_err());
    }
}
