//! `changelog.fetch`: one changelog into the shared cache (decisions §16).
//!
//! The distribution's URL template is tried with each component in order; the first answer
//! that is not a 404 decides. A 200 is read up to 4 MiB (a larger changelog is cut there: the
//! newest entries come first, and the last entry read, which may stop mid-way, is left out),
//! gunzipped when compressed, parsed, and its newest entries up to the target version kept
//! (`found`); a 404 from every component, any other refusal, or a
//! body with no usable entry is `missing`. A 5xx, a timeout or a failed connection is
//! retried with backoff (1 minute doubling, at most 30) for six hours from the first attempt,
//! then `missing`. Every outcome the archive causes is the job's success: only the database
//! failing retries the job itself.

use std::time::Duration;

use apalis::prelude::{BoxDynError, Data};
use domain::intel::jobs::FetchChangelog;
use domain::intel::{
    cache,
    changelog::{self, ChangelogStatus},
};
use entities::{
    changelogs,
    json::{ChangelogEntry, JsonText},
};
use platform::{
    jobs::Queue,
    outbound::{OutboundError, read_prefix},
};
use reqwest::{Method, StatusCode};
use sea_orm::{ActiveModelTrait, Set};
use url::Url;

use crate::Deps;

/// How long failures worth retrying are retried, from the first attempt.
pub const RETRY_FOR: chrono::Duration = chrono::Duration::hours(6);

/// What one fetch found.
#[derive(Debug)]
enum Found {
    Entries {
        url: String,
        entries: Vec<ChangelogEntry>,
    },
    Unavailable(String),
    Retry(String),
}

pub async fn run(job: FetchChangelog, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    let row = cache::row_for(&deps.db, &job, now).await?;
    if ChangelogStatus::from(row.status.as_str()) != ChangelogStatus::Pending
        || row.attempts > job.attempt
    {
        return Ok(()); // Done already, or a duplicate of an attempt already made.
    }
    let found = fetch(&deps, &job).await;
    let first = row.first_attempt_at.unwrap_or(now);
    let mut active: changelogs::ActiveModel = row.into();
    active.first_attempt_at = Set(Some(first));
    active.updated_at = Set(now);
    match found {
        Found::Entries { url, entries } => {
            active.status = Set(ChangelogStatus::Found.into());
            active.url = Set(Some(url));
            active.entries = Set(JsonText::new(&entries)?);
            active.fetched_at = Set(Some(now));
            active.update(&deps.db.orm).await?;
        }
        Found::Unavailable(reason) => {
            tracing::warn!(
                distro = %job.distro, source = %job.source, version = %job.version, %reason,
                "changelog unavailable"
            );
            active.status = Set(ChangelogStatus::Missing.into());
            active.fetched_at = Set(Some(now));
            active.update(&deps.db.orm).await?;
        }
        Found::Retry(reason) if now - first >= RETRY_FOR => {
            tracing::warn!(
                distro = %job.distro, source = %job.source, version = %job.version, %reason,
                attempts = job.attempt + 1,
                "changelog unavailable: the archive kept failing for six hours"
            );
            active.status = Set(ChangelogStatus::Missing.into());
            active.attempts = Set(job.attempt + 1);
            active.fetched_at = Set(Some(now));
            active.update(&deps.db.orm).await?;
        }
        Found::Retry(reason) => {
            let delay = retry_delay(job.attempt);
            tracing::info!(
                distro = %job.distro, source = %job.source, version = %job.version, %reason,
                retry_in_s = delay.as_secs(),
                "changelog fetch failed; retrying"
            );
            active.attempts = Set(job.attempt + 1);
            active.update(&deps.db.orm).await?;
            let next = FetchChangelog {
                attempt: job.attempt + 1,
                ..job
            };
            Queue::new(&deps.db)
                .push_unique_after(&cache::job_key(&next), next, delay)
                .await?;
        }
    }
    Ok(())
}

/// The wait before retry number `attempt + 1`: one minute, doubling, at most 30 minutes.
pub fn retry_delay(attempt: i32) -> Duration {
    let minutes = 1u64 << attempt.clamp(0, 5);
    Duration::from_secs(60 * minutes.min(30))
}

async fn fetch(deps: &Deps, job: &FetchChangelog) -> Found {
    let (Some(template), Some(components)) = (
        deps.config.changelog_template(&job.distro),
        changelog::components(&job.distro),
    ) else {
        return Found::Unavailable("the distribution publishes no changelogs".into());
    };
    if !changelog::plausible(&job.source, &job.version) {
        return Found::Unavailable("not a Debian source package name and version".into());
    }
    for component in components {
        let text = changelog::url(template, component, &job.source, &job.version);
        let Ok(url) = Url::parse(&text) else {
            return Found::Unavailable("the URL template gives no URL".into());
        };
        let request = match deps.outbound.request(Method::GET, &url) {
            Ok(request) => request.header("Accept-Encoding", "gzip"),
            Err(err) => return Found::Unavailable(err.to_string()),
        };
        let response = match deps.outbound.send(request).await {
            Ok(response) => response,
            Err(err @ OutboundError::Refused(_)) => return Found::Unavailable(err.to_string()),
            Err(err) => return Found::Retry(err.to_string()),
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
            continue;
        }
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Found::Retry(format!("the archive answered {status}"));
        }
        if !status.is_success() {
            return Found::Unavailable(format!("the archive answered {status}"));
        }
        let (body, cut) = match read_prefix(response, changelog::MAX_BYTES).await {
            Ok(read) => read,
            Err(OutboundError::Timeout) => return Found::Retry("timed out reading".into()),
            Err(err) => return Found::Retry(err.to_string()),
        };
        if cut {
            tracing::warn!(
                distro = %job.distro, source = %job.source, version = %job.version,
                limit = changelog::MAX_BYTES,
                "changelog larger than the limit: only its first part is read"
            );
        }
        let entries = changelog::decode(&body, cut)
            .and_then(|text| changelog::entries_up_to(&text, &job.version));
        return match entries {
            Ok(entries) => Found::Entries { url: text, entries },
            Err(err) => Found::Unavailable(err.to_string()),
        };
    }
    Found::Unavailable("no component of the archive has it (404)".into())
}
