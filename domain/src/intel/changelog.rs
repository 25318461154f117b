//! Debian-family changelogs (decisions §16): where one is fetched from, how a fetched file
//! becomes entries, and which entries a change shows.
//!
//! Parsing is `debian-changelog` (relaxed: an entry without a trailer still counts) and version
//! order is `debversion` (epochs, `~`, `+` as dpkg orders them); nothing here compares versions
//! by hand.

use std::{io::Read, sync::LazyLock};

use debversion::Version;
use entities::json::ChangelogEntry;

use crate::status::Ecosystem;

/// Entries shown per change (interface.md, Limits).
pub const MAX_ENTRIES: usize = 15;
/// The most of a changelog that is read (compressed or not) and, decompressed, parsed. A
/// changelog is newest first, so what is past this is never needed for the newest entries.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;
/// The most of one entry's text that is kept.
const MAX_TEXT: usize = 16 * 1024;

pub use crate::status::ChangelogStatus;

/// Distributions whose archives publish changelogs, with their components in the order tried.
pub fn components(distro: &str) -> Option<&'static [&'static str]> {
    match distro {
        "ubuntu" => Some(&["main", "universe", "restricted", "multiverse"]),
        "debian" => Some(&["main", "contrib", "non-free"]),
        _ => None,
    }
}

/// Whether a change (ecosystem, distribution, source package) has a changelog to fetch.
pub fn has_changelog(ecosystem: &str, distro: Option<&str>, source: Option<&str>) -> bool {
    Ecosystem::from(ecosystem) == Ecosystem::Deb
        && source.is_some()
        && distro.and_then(components).is_some()
}

/// The archive's pool prefix of a source package: `libf` for `libfoo`, else its first letter.
pub fn pool_prefix(source: &str) -> String {
    if source.starts_with("lib") && source.len() > 3 {
        source.chars().take(4).collect()
    } else {
        source.chars().take(1).collect()
    }
}

/// A version as it appears in archive file names: without its epoch.
pub fn without_epoch(version: &str) -> &str {
    match version.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        _ => version,
    }
}

/// Whether a source package name and version are safe to put into a URL path (Debian policy
/// allows only these characters; anything else is not a real package and is not fetched).
pub fn plausible(source: &str, version: &str) -> bool {
    let source_ok = !source.is_empty()
        && source.len() <= 100
        && source
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b));
    let version_ok = !version.is_empty()
        && version.len() <= 100
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+-~:".contains(&b));
    source_ok && version_ok
}

/// The URL of a changelog from `template` (placeholders `{component}`, `{prefix}`,
/// `{source}`, `{version}`).
pub fn url(template: &str, component: &str, source: &str, version: &str) -> String {
    template
        .replace("{component}", component)
        .replace("{prefix}", &pool_prefix(source))
        .replace("{source}", source)
        .replace("{version}", without_epoch(version))
}

/// Why a fetched body yields no entries.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("the compressed body cannot be read: {0}")]
    Gzip(String),
    #[error("the target version {0:?} is not a Debian version")]
    BadTarget(String),
    #[error("no changelog entry at or below the target version")]
    NoEntries,
}

/// The body as text: gunzipped when it is gzip (by magic, whatever the headers said), at most
/// [`MAX_BYTES`] of it, bytes that are not UTF-8 replaced. `cut` says the body is only the
/// first part of a longer answer: its compressed stream then ends early by design, and what
/// decompressed before that end is kept; otherwise a stream that ends early is unusable.
/// Text that stops short of the changelog's end (a cut body, or more than [`MAX_BYTES`]
/// decompressed) loses its last entry, which may stop mid-way, unless it is the only one.
pub fn decode(body: &[u8], cut: bool) -> Result<String, Unusable> {
    let (bytes, short) = if body.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        let mut decoder = flate2::read::MultiGzDecoder::new(body).take(MAX_BYTES as u64 + 1);
        let mut buffer = [0u8; 64 * 1024];
        let mut ended_early = false;
        loop {
            match decoder.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buffer[..n]),
                Err(_) if cut && !out.is_empty() => {
                    ended_early = true;
                    break;
                }
                Err(e) => return Err(Unusable::Gzip(e.to_string())),
            }
        }
        let over = out.len() > MAX_BYTES;
        out.truncate(MAX_BYTES);
        (out, ended_early || over)
    } else {
        (
            body[..body.len().min(MAX_BYTES)].to_vec(),
            cut || body.len() > MAX_BYTES,
        )
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(if short {
        without_last_entry(text)
    } else {
        text
    })
}

/// `text` up to the start of its last entry (a line that begins with no blank, as an entry's
/// first line does and nothing else in a changelog), when it has more than one.
fn without_last_entry(mut text: String) -> String {
    let last = text
        .rmatch_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&start| {
            text[start..]
                .chars()
                .next()
                .is_some_and(|c| !c.is_whitespace())
        });
    if let Some(start) = last {
        text.truncate(start);
    }
    text
}

static CVE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::RegexBuilder::new(r"\bCVE-\d{4}-\d{4,19}\b")
        .case_insensitive(true)
        .build()
        .unwrap_or_else(|e| unreachable!("constant pattern: {e}"))
});

/// The CVE ids a text names, upper-cased, each once, in order of first mention.
pub fn cves(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for m in CVE.find_iter(text) {
        let id = m.as_str().to_ascii_uppercase();
        if !found.contains(&id) {
            found.push(id);
        }
    }
    found
}

fn clip(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n[…]");
    }
    text
}

/// The newest entries at or below `target`, newest first (dpkg order), at most
/// [`MAX_ENTRIES`]: what the cache keeps, enough for any change to `target` whatever its
/// starting version. An entry whose version cannot be read is skipped.
pub fn entries_up_to(text: &str, target: &str) -> Result<Vec<ChangelogEntry>, Unusable> {
    let target: Version = target
        .parse()
        .map_err(|_| Unusable::BadTarget(target.to_owned()))?;
    let changelog = debian_changelog::ChangeLog::parse_relaxed(text);
    let mut found: Vec<(Version, ChangelogEntry)> = Vec::new();
    for entry in changelog.iter() {
        let Some(Ok(version)) = entry.try_version() else {
            continue;
        };
        if version > target {
            continue;
        }
        let body: Vec<String> = entry.change_lines().collect();
        let text = clip(body.join("\n"));
        let author = match (entry.maintainer(), entry.email()) {
            (Some(name), Some(email)) => Some(format!("{} <{}>", name.trim(), email.trim())),
            (Some(name), None) => Some(name.trim().to_owned()),
            (None, Some(email)) => Some(format!("<{}>", email.trim())),
            (None, None) => None,
        };
        found.push((
            version.clone(),
            ChangelogEntry {
                version: version.to_string(),
                date: entry
                    .datetime()
                    .map(|d| d.with_timezone(&chrono::Utc).to_rfc3339()),
                author,
                urgency: entry.urgency().map(|u| u.to_string()),
                distribution: entry
                    .distributions()
                    .filter(|names| !names.is_empty())
                    .map(|names| names.join(" ")),
                cves: cves(&text),
                text,
            },
        ));
        // Changelogs are newest first; a few more than needed allows for one out of order.
        if found.len() >= MAX_ENTRIES * 4 {
            break;
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0));
    found.dedup_by(|a, b| a.0 == b.0);
    found.truncate(MAX_ENTRIES);
    if found.is_empty() {
        return Err(Unusable::NoEntries);
    }
    Ok(found.into_iter().map(|(_, e)| e).collect())
}

/// The cached entries a change from `from` to `to` shows: newer than `from` and up to `to`,
/// newest first, at most [`MAX_ENTRIES`]. A `from` that is not a Debian version hides none.
pub fn between(entries: Vec<ChangelogEntry>, from: &str, to: &str) -> Vec<ChangelogEntry> {
    let from: Option<Version> = from.parse().ok();
    let to: Option<Version> = to.parse().ok();
    entries
        .into_iter()
        .filter(|e| {
            let Ok(v) = e.version.parse::<Version>() else {
                return false;
            };
            from.as_ref().is_none_or(|from| &v > from) && to.as_ref().is_none_or(|to| &v <= to)
        })
        .take(MAX_ENTRIES)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_order_of_epochs_tildes_and_plus() {
        let v = |s: &str| s.parse::<Version>().expect("version");
        assert!(v("1:2.0~rc1") < v("1:2.0"));
        assert!(v("1:2.0") < v("1:2.0+b1"));
        assert!(v("2.0+b1") < v("1:1.0"));
        assert!(v("3.0.13-0ubuntu3.4") < v("3.0.13-0ubuntu3.5"));
    }

    #[test]
    fn urls_drop_the_epoch_and_use_the_pool_prefix() {
        let template = "https://changelogs.ubuntu.com/changelogs/pool/{component}/{prefix}/{source}/{source}_{version}/changelog";
        assert_eq!(
            url(template, "main", "libxml2", "1:2.9.14+dfsg-1.3ubuntu3"),
            "https://changelogs.ubuntu.com/changelogs/pool/main/libx/libxml2/libxml2_2.9.14+dfsg-1.3ubuntu3/changelog"
        );
        assert_eq!(
            url(template, "universe", "openssl", "3.0.13-0ubuntu3.5"),
            "https://changelogs.ubuntu.com/changelogs/pool/universe/o/openssl/openssl_3.0.13-0ubuntu3.5/changelog"
        );
        assert_eq!(without_epoch("10:1.0"), "1.0");
        assert_eq!(without_epoch("a:1.0"), "a:1.0");
        assert!(!plausible("../etc", "1.0"));
        assert!(!plausible("openssl", "1.0/../../x"));
    }

    #[test]
    fn cve_ids_are_pulled_from_text_once_each() {
        assert_eq!(
            cves("fixes cve-2024-1234 and CVE-2024-12345; again CVE-2024-1234"),
            vec!["CVE-2024-1234", "CVE-2024-12345"]
        );
    }

    const TEXT: &str = "pkg (1:2.0+b1) unstable; urgency=medium\n\n  * Rebuild. CVE-2025-0001\n\n -- A B <a@example.org>  Mon, 01 Jan 2024 00:00:00 +0000\n\npkg (1:2.0) unstable; urgency=high\n\n  * Release.\n\n -- A B <a@example.org>  Sun, 31 Dec 2023 00:00:00 +0000\n\npkg (1:2.0~rc1) experimental; urgency=low\n\n  * Candidate.\n\n -- A B <a@example.org>  Sat, 30 Dec 2023 00:00:00 +0000\n";

    #[test]
    fn entries_are_newest_first_and_filtered_by_the_change() {
        let all = entries_up_to(TEXT, "1:2.0+b1").expect("entries");
        let versions: Vec<&str> = all.iter().map(|e| e.version.as_str()).collect();
        assert_eq!(versions, ["1:2.0+b1", "1:2.0", "1:2.0~rc1"]);
        assert_eq!(all[0].cves, ["CVE-2025-0001"]);
        assert_eq!(all[0].urgency.as_deref(), Some("medium"));
        assert_eq!(all[0].author.as_deref(), Some("A B <a@example.org>"));
        let shown = between(all.clone(), "1:2.0~rc1", "1:2.0+b1");
        assert_eq!(shown.len(), 2);
        let up_to = entries_up_to(TEXT, "1:2.0").expect("entries");
        assert_eq!(up_to[0].version, "1:2.0");
    }

    #[test]
    fn an_entry_without_a_trailer_still_counts() {
        let text = "pkg (1.1) unstable; urgency=low\n\n  * No trailer follows.\n";
        let entries = entries_up_to(text, "1.1").expect("entries");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].date, None);
    }

    #[test]
    fn garbage_and_truncated_gzip_are_unusable() {
        assert!(matches!(
            entries_up_to(&"x".repeat(10_000), "1.0"),
            Err(Unusable::NoEntries)
        ));
        let mut gz = Vec::new();
        {
            use std::io::Write;
            let mut enc = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::default());
            enc.write_all(TEXT.repeat(50).as_bytes()).expect("write");
            enc.finish().expect("finish");
        }
        assert!(
            decode(&gz, false)
                .expect("whole gzip")
                .starts_with("pkg (1:2.0+b1)")
        );
        assert!(matches!(
            decode(&gz[..gz.len() / 2], false),
            Err(Unusable::Gzip(_))
        ));
        assert!(
            decode(&gz[..gz.len() / 2], true)
                .expect("a cut answer")
                .starts_with("pkg")
        );
        // A cut answer's last entry may stop mid-way: it is left out, whole entries kept.
        let cut_text = TEXT.repeat(3);
        let cut_at = cut_text.len() - 10;
        let last_start = TEXT.rfind("\npkg (").expect("three entries") + 1;
        let whole_entries = TEXT.repeat(2) + &TEXT[..last_start];
        let decoded = decode(&cut_text.as_bytes()[..cut_at], true).expect("a cut answer");
        assert_eq!(decoded, whole_entries, "the partial ninth entry is dropped");
        let mut gz = Vec::new();
        {
            use std::io::Write;
            let mut enc = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::default());
            enc.write_all(cut_text.as_bytes()).expect("write");
            enc.finish().expect("finish");
        }
        // Cut in its trailer: everything decompressed, but whether more followed is unknown.
        let decoded = decode(&gz[..gz.len() - 8], true).expect("a cut gzip answer");
        assert_eq!(decoded, whole_entries, "the last entry is dropped");
        // A cut answer of one entry keeps it (each entry's text is clipped anyway).
        let first_end = TEXT.find("\npkg (").expect("three entries") + 1;
        let one = &TEXT[..first_end - 20];
        assert_eq!(decode(one.as_bytes(), true).expect("one entry"), one);
        // A whole answer keeps every entry.
        assert_eq!(decode(cut_text.as_bytes(), false).expect("whole"), cut_text);
        let lossy =
            decode(b"pkg (1.0) unstable; urgency=low\n\n  * caf\xe9\n", false).expect("text");
        assert!(lossy.contains('\u{fffd}'));
    }
}
