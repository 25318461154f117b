//! Agent release channels (decisions §11, §16): the manifest at `AGENT_MANIFEST_URL`, read at
//! start and hourly, and whether a host's agent is behind its channel (semver).

use chrono::{DateTime, Utc};
use entities::agent_releases;
use entities::scope::Untenanted;
use platform::db::Database;
use sea_orm::{EntityTrait, Set, TransactionTrait};
use serde::Deserialize;

/// The channels, in the order they are listed (stable first).
pub const CHANNELS: [&str; 2] = ["stable", "beta"];
/// The most of a manifest that is read.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
struct Manifest {
    channels: Vec<ManifestChannel>,
}

#[derive(Deserialize)]
struct ManifestChannel {
    channel: String,
    version: String,
    #[serde(default)]
    released_at: Option<DateTime<Utc>>,
}

/// One channel as the manifest states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub channel: String,
    pub version: String,
    pub released_at: Option<DateTime<Utc>>,
}

/// Why a manifest is refused (the previous channels are kept).
#[derive(Debug, thiserror::Error)]
pub enum BadManifest {
    #[error("not a manifest: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("unknown channel {0:?} (expected stable or beta)")]
    UnknownChannel(String),
    #[error("channel {0} listed twice")]
    Duplicate(String),
    #[error("channel {channel}: version {version:?} is not a semantic version")]
    BadVersion { channel: String, version: String },
}

/// Reads `{"channels":[{"channel","version","released_at"}]}`; any bad channel refuses all.
pub fn parse(body: &[u8]) -> Result<Vec<Release>, BadManifest> {
    let manifest: Manifest = serde_json::from_slice(body).map_err(BadManifest::NotJson)?;
    let mut releases: Vec<Release> = Vec::new();
    for c in manifest.channels {
        if !CHANNELS.contains(&c.channel.as_str()) {
            return Err(BadManifest::UnknownChannel(c.channel));
        }
        if releases.iter().any(|r| r.channel == c.channel) {
            return Err(BadManifest::Duplicate(c.channel));
        }
        if semver::Version::parse(c.version.trim_start_matches('v')).is_err() {
            return Err(BadManifest::BadVersion {
                channel: c.channel,
                version: c.version,
            });
        }
        releases.push(Release {
            channel: c.channel,
            version: c.version,
            released_at: c.released_at,
        });
    }
    Ok(releases)
}

/// Replaces the stored channels with `releases`, seen at `now`.
pub async fn store(
    db: &Database,
    releases: Vec<Release>,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let txn = db.orm.begin().await?;
    agent_releases::Entity::delete_rows().exec(&txn).await?;
    for r in releases {
        agent_releases::Entity::insert(agent_releases::ActiveModel {
            channel: Set(r.channel),
            version: Set(r.version),
            released_at: Set(r.released_at),
            seen_at: Set(now),
        })
        .exec_without_returning(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Orders stored channels as listed: stable first, then beta (then anything else by name).
pub fn stable_first(rows: &mut [agent_releases::Model]) {
    rows.sort_by(|a, b| {
        let rank = |r: &agent_releases::Model| {
            CHANNELS
                .iter()
                .position(|c| *c == r.channel)
                .unwrap_or(CHANNELS.len())
        };
        rank(a)
            .cmp(&rank(b))
            .then_with(|| a.channel.cmp(&b.channel))
    });
}

fn semver_of(text: &str) -> Option<semver::Version> {
    semver::Version::parse(text.trim().trim_start_matches('v')).ok()
}

/// Whether the channel `channel` (stable when the host does not say) holds a newer build than
/// `agent_version`. False when either version is unknown or not a semantic version.
pub fn update_available(
    releases: &[agent_releases::Model],
    agent_version: Option<&str>,
    channel: Option<&str>,
) -> bool {
    let channel = channel.unwrap_or("stable");
    let Some(release) = releases.iter().find(|r| r.channel == channel) else {
        return false;
    };
    match (
        agent_version.and_then(semver_of),
        semver_of(&release.version),
    ) {
        (Some(host), Some(offered)) => offered > host,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_read_or_refused_whole() {
        let ok = parse(br#"{"channels":[{"channel":"beta","version":"1.3.0-rc.1"},{"channel":"stable","version":"1.2.0","released_at":"2026-11-01T00:00:00Z"}]}"#).expect("manifest");
        assert_eq!(ok.len(), 2);
        assert!(matches!(parse(b"<html>"), Err(BadManifest::NotJson(_))));
        assert!(matches!(
            parse(br#"{"channels":[{"channel":"nightly","version":"1.0.0"}]}"#),
            Err(BadManifest::UnknownChannel(_))
        ));
        assert!(matches!(
            parse(br#"{"channels":[{"channel":"stable","version":"one"}]}"#),
            Err(BadManifest::BadVersion { .. })
        ));
    }

    #[test]
    fn an_update_is_available_when_the_channel_is_newer() {
        let row = |channel: &str, version: &str| agent_releases::Model {
            channel: channel.into(),
            version: version.into(),
            released_at: None,
            seen_at: DateTime::<Utc>::UNIX_EPOCH,
        };
        let releases = [row("stable", "1.2.0"), row("beta", "1.3.0-rc.1")];
        assert!(update_available(&releases, Some("1.1.9"), None));
        assert!(!update_available(&releases, Some("1.2.0"), Some("stable")));
        assert!(update_available(&releases, Some("1.2.0"), Some("beta")));
        assert!(!update_available(&releases, Some("1.3.0"), Some("beta")));
        assert!(!update_available(&releases, Some("garbage"), None));
        assert!(!update_available(&[], Some("1.0.0"), None));
    }
}
