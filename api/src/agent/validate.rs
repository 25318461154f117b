//! Bounds on what agents report, checked before anything is stored: every string an agent
//! sends ends up in front of people (host pages, proposals, emails), so each has a length bound
//! and may hold no control character or direction override, and advisory links are `https`
//! only, never `javascript:` or `data:` or plain `http`.
//! A refusal is 400 `invalid-request` naming the field, e.g. `updates[3].advisories[0].url`.

use crate::http::{error::ApiError, input, input::is_unshowable};
use protocol::wire::{Advisory, CheckIn, Facts, Impact, MAX_IMPACT_ENTRIES, Package, Update};

/// Most characters of a fact, a package or update field, an advisory id, source, severity or
/// CVE.
pub const MAX_FIELD: usize = 255;
/// Most characters of an advisory title.
pub const MAX_TITLE: usize = 1_000;
/// Most characters of an advisory URL.
pub const MAX_URL: usize = 2_048;
/// Most entries of `facts.agent_permissions`.
pub const MAX_PERMISSIONS: usize = 64;
/// Most packages, updates, services or held packages one check-in may report.
pub const MAX_INVENTORY: usize = 50_000;
/// Longest `inventory_digest`.
pub const MAX_DIGEST: usize = 128;

/// Every agent string: bounded, and on one line with nothing that repaints a terminal or turns
/// the text around it (control characters, Unicode direction overrides), as display names are.
fn at_most(field: &dyn Fn() -> String, value: &str, max: usize) -> Result<(), ApiError> {
    if value.chars().count() > max {
        return Err(ApiError::invalid(format!(
            "{} must be at most {max} characters",
            field()
        )));
    }
    if value.chars().any(is_unshowable) {
        return input::showable(&field(), value, false);
    }
    Ok(())
}

fn field(name: &str, value: &str) -> Result<(), ApiError> {
    at_most(&|| name.to_owned(), value, MAX_FIELD)
}

fn optional(name: &str, value: Option<&str>) -> Result<(), ApiError> {
    value.map_or(Ok(()), |v| field(name, v))
}

fn required(name: &str, value: &str) -> Result<(), ApiError> {
    if value.is_empty() {
        return Err(ApiError::invalid(format!(
            "{name} must be 1 to {MAX_FIELD} characters"
        )));
    }
    field(name, value)
}

fn list(name: &str, values: &[String], max_entries: usize) -> Result<(), ApiError> {
    if values.len() > max_entries {
        return Err(ApiError::invalid(format!(
            "{name}: at most {max_entries} entries"
        )));
    }
    for (i, value) in values.iter().enumerate() {
        at_most(&|| format!("{name}[{i}]"), value, MAX_FIELD)?;
    }
    Ok(())
}

/// A link people may follow: `https` with a host, no user name or password, bounded.
fn https_url(name: &dyn Fn() -> String, value: &str) -> Result<(), ApiError> {
    at_most(name, value, MAX_URL)?;
    let acceptable = url::Url::parse(value).is_ok_and(|url| {
        url.scheme() == "https"
            && url.host_str().is_some_and(|host| !host.is_empty())
            && url.username().is_empty()
            && url.password().is_none()
    });
    if !acceptable {
        return Err(ApiError::invalid(format!(
            "{} must be an https URL (no user name or password)",
            name()
        )));
    }
    Ok(())
}

/// The facts of an enrolment or a check-in.
pub fn facts(facts: &Facts) -> Result<(), ApiError> {
    required("facts.hostname", &facts.hostname)?;
    required("facts.machine_id", &facts.machine_id)?;
    for (name, value) in [
        ("facts.distro", &facts.distro),
        ("facts.distro_version", &facts.distro_version),
        ("facts.distro_codename", &facts.distro_codename),
        ("facts.os_family", &facts.os_family),
        ("facts.arch", &facts.arch),
        ("facts.kernel_version", &facts.kernel_version),
        ("facts.virtualization", &facts.virtualization),
        ("facts.agent_version", &facts.agent_version),
        ("facts.agent_mode", &facts.agent_mode),
    ] {
        optional(name, value.as_deref())?;
    }
    if let Some(permissions) = &facts.agent_permissions {
        list("facts.agent_permissions", permissions, MAX_PERMISSIONS)?;
    }
    if let Some(install) = &facts.agent_install {
        field("facts.agent_install.method", &install.method)?;
        optional("facts.agent_install.channel", install.channel.as_deref())?;
    }
    if let Some(cloud) = &facts.cloud {
        optional("facts.cloud.provider", cloud.provider.as_deref())?;
        optional("facts.cloud.region", cloud.region.as_deref())?;
        optional("facts.cloud.instance_id", cloud.instance_id.as_deref())?;
    }
    if let Some(frozen) = &facts.frozen {
        field("facts.frozen.kind", &frozen.kind)?;
        field("facts.frozen.pinned", &frozen.pinned)?;
        optional("facts.frozen.latest", frozen.latest.as_deref())?;
    }
    if let Some(snapshots) = &facts.snapshots {
        optional("facts.snapshots.provider", snapshots.provider.as_deref())?;
        field("facts.snapshots.reason", &snapshots.reason)?;
    }
    Ok(())
}

fn package(i: usize, p: &Package) -> Result<(), ApiError> {
    let name = |part: &str| format!("packages[{i}].{part}");
    for (part, value) in [
        ("name", Some(&p.name)),
        ("version", Some(&p.version)),
        ("arch", Some(&p.arch)),
        ("source_name", p.source_name.as_ref()),
        ("source_version", p.source_version.as_ref()),
    ] {
        if let Some(value) = value {
            at_most(&|| name(part), value, MAX_FIELD)?;
        }
    }
    Ok(())
}

fn advisory(at: &str, a: &Advisory) -> Result<(), ApiError> {
    let name = |part: &str| format!("{at}.{part}");
    for (part, value) in [
        ("external_id", Some(&a.external_id)),
        ("source", Some(&a.source)),
        ("severity", a.severity.as_ref()),
    ] {
        if let Some(value) = value {
            at_most(&|| name(part), value, MAX_FIELD)?;
        }
    }
    if let Some(title) = &a.title {
        at_most(&|| name("title"), title, MAX_TITLE)?;
    }
    if let Some(url) = &a.url {
        https_url(&|| name("url"), url)?;
    }
    for (i, cve) in a.cves.iter().enumerate() {
        at_most(&|| format!("{at}.cves[{i}]"), cve, MAX_FIELD)?;
    }
    Ok(())
}

/// An update's impact (decisions §21): each list at most [`MAX_IMPACT_ENTRIES`] entries, every
/// unit, package name and version 1–255 showable characters.
fn impact(at: &str, impact: &Impact) -> Result<(), ApiError> {
    let bounded = |list: &str, len: usize| {
        if len > MAX_IMPACT_ENTRIES {
            Err(ApiError::invalid(format!(
                "{at}.{list}: at most {MAX_IMPACT_ENTRIES} entries"
            )))
        } else {
            Ok(())
        }
    };
    bounded("restarts", impact.restarts.len())?;
    bounded("installs", impact.installs.len())?;
    bounded("removes", impact.removes.len())?;
    for (i, unit) in impact.restarts.iter().enumerate() {
        required(&format!("{at}.restarts[{i}]"), unit)?;
    }
    for (i, install) in impact.installs.iter().enumerate() {
        required(&format!("{at}.installs[{i}].name"), &install.name)?;
        required(&format!("{at}.installs[{i}].version"), &install.version)?;
    }
    for (i, name) in impact.removes.iter().enumerate() {
        required(&format!("{at}.removes[{i}]"), name)?;
    }
    Ok(())
}

fn update(i: usize, u: &Update) -> Result<(), ApiError> {
    let name = |part: &str| format!("updates[{i}].{part}");
    for (part, value) in [
        ("name", Some(&u.name)),
        ("arch", Some(&u.arch)),
        ("from_version", Some(&u.from_version)),
        ("to_version", Some(&u.to_version)),
        ("ecosystem", Some(&u.ecosystem)),
        ("source_name", u.source_name.as_ref()),
    ] {
        if let Some(value) = value {
            at_most(&|| name(part), value, MAX_FIELD)?;
        }
    }
    for (j, a) in u.advisories.iter().enumerate() {
        advisory(&format!("updates[{i}].advisories[{j}]"), a)?;
    }
    if let Some(found) = &u.impact {
        impact(&format!("updates[{i}].impact"), found)?;
    }
    Ok(())
}

/// A whole check-in: its facts, inventory and the lists beside it.
pub fn check_in(body: &CheckIn) -> Result<(), ApiError> {
    facts(&body.facts)?;
    if body.inventory_digest.is_empty() || body.inventory_digest.chars().count() > MAX_DIGEST {
        return Err(ApiError::invalid(format!(
            "inventory_digest must be 1 to {MAX_DIGEST} characters"
        )));
    }
    if body
        .packages
        .as_ref()
        .is_some_and(|p| p.len() > MAX_INVENTORY)
        || body
            .updates
            .as_ref()
            .is_some_and(|u| u.len() > MAX_INVENTORY)
    {
        return Err(ApiError::invalid(format!(
            "at most {MAX_INVENTORY} packages and updates"
        )));
    }
    for (i, p) in body.packages.iter().flatten().enumerate() {
        package(i, p)?;
    }
    for (i, u) in body.updates.iter().flatten().enumerate() {
        update(i, u)?;
    }
    if let Some(services) = &body.services_need_restart {
        list("services_need_restart", services, MAX_INVENTORY)?;
    }
    if let Some(held) = &body.held_packages {
        list("held_packages", held, MAX_INVENTORY)?;
    }
    if let Some(upgrade) = &body.release_upgrade {
        optional(
            "release_upgrade.to.codename",
            upgrade.to.codename.as_deref(),
        )?;
        optional("release_upgrade.to.version", upgrade.to.version.as_deref())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<(), ApiError>) -> String {
        match result {
            Err(ApiError::InvalidRequest(detail)) => detail,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn advisory_links_are_https_with_a_host_and_no_credentials() {
        let name = || "url".to_owned();
        for fine in [
            "https://ubuntu.com/security/notices/USN-7000-1",
            "https://access.redhat.com/errata/RHSA-2024:1234?x=1#y",
        ] {
            assert!(https_url(&name, fine).is_ok(), "{fine}");
        }
        for bad in [
            "javascript:alert(1)",
            "JAVASCRIPT:alert(1)",
            "http://ubuntu.com/",
            "data:text/html,hi",
            "https://",
            "https://user:pw@example.com/",
            "https://ubuntu.com@evil.example/",
            "//example.com/x",
            "ubuntu.com/x",
            "",
        ] {
            assert!(refused(https_url(&name, bad)).contains("url"), "{bad}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL));
        assert!(refused(https_url(&name, &long)).contains("2048"));
    }

    fn an_update(impact: Option<Impact>) -> Update {
        Update {
            name: "openssl".into(),
            arch: "amd64".into(),
            from_version: "1".into(),
            to_version: "2".into(),
            ecosystem: "deb".into(),
            source_name: None,
            security: false,
            requires_reboot: false,
            advisories: Vec::new(),
            impact,
        }
    }

    #[test]
    fn impacts_are_bounded_and_name_the_field() {
        let fine = Impact {
            reboot: true,
            restarts: vec!["nginx.service".into(); MAX_IMPACT_ENTRIES],
            installs: vec![protocol::wire::ImpactInstall {
                name: "libssl3t64".into(),
                version: "3.0.13".into(),
            }],
            removes: vec!["libssl3".into()],
        };
        assert!(update(0, &an_update(Some(fine.clone()))).is_ok());
        assert!(update(0, &an_update(None)).is_ok());
        let too_many = Impact {
            restarts: vec!["x.service".into(); MAX_IMPACT_ENTRIES + 1],
            ..fine.clone()
        };
        assert!(
            refused(update(2, &an_update(Some(too_many)))).contains("updates[2].impact.restarts")
        );
        let control = Impact {
            restarts: vec!["ok.service".into(), "evil\u{1b}[2J.service".into()],
            ..fine.clone()
        };
        assert!(
            refused(update(0, &an_update(Some(control)))).contains("updates[0].impact.restarts[1]")
        );
        let empty = Impact {
            installs: vec![protocol::wire::ImpactInstall {
                name: "x".into(),
                version: String::new(),
            }],
            ..fine.clone()
        };
        assert!(
            refused(update(0, &an_update(Some(empty))))
                .contains("updates[0].impact.installs[0].version")
        );
        let long = Impact {
            removes: vec!["r".repeat(MAX_FIELD + 1)],
            ..fine
        };
        assert!(
            refused(update(0, &an_update(Some(long)))).contains("updates[0].impact.removes[0]")
        );
    }

    #[test]
    fn lengths_count_characters_not_bytes() {
        let name = || "f".to_owned();
        assert!(at_most(&name, &"é".repeat(MAX_FIELD), MAX_FIELD).is_ok());
        assert!(at_most(&name, &"é".repeat(MAX_FIELD + 1), MAX_FIELD).is_err());
    }
}
