//! With the `openapi` feature a wire type has two JSON codecs, serde's (what the agent and the
//! service's request parsing use) and poem-openapi's (what the service answers with): they must
//! write the same JSON and read each other's.

#![allow(clippy::unwrap_used)]

use chrono::{TimeZone, Utc};
use poem_openapi::types::{ParseFromJSON, ToJSON};
use serde::{Serialize, de::DeserializeOwned};

use super::*;

/// Times as one spelling: poem-openapi writes UTC as `+00:00`, serde (chrono) as `Z`; both
/// are RFC 3339 and read back alike.
fn utc_as_z(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(match s.strip_suffix("+00:00") {
            Some(time) if chrono::DateTime::parse_from_rfc3339(&s).is_ok() => format!("{time}Z"),
            _ => s,
        }),
        Value::Array(items) => Value::Array(items.into_iter().map(utc_as_z).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, utc_as_z(v))).collect())
        }
        other => other,
    }
}

/// An answer: both write the same JSON (times aside, [`utc_as_z`]), and each reads it back.
fn agree<T>(value: &T)
where
    T: Serialize + DeserializeOwned + ToJSON + ParseFromJSON + PartialEq + std::fmt::Debug,
{
    let by_serde = serde_json::to_value(value).unwrap();
    let by_openapi = value.to_json().unwrap();
    assert_eq!(
        utc_as_z(by_serde),
        utc_as_z(by_openapi),
        "{}",
        std::any::type_name::<T>()
    );
    read_alike(value);
}

/// A request (which only serde writes: the agent leaves absent fields out where poem-openapi
/// would write `null`): each codec reads what the other writes as the same value.
fn read_alike<T>(value: &T)
where
    T: Serialize + DeserializeOwned + ToJSON + ParseFromJSON + PartialEq + std::fmt::Debug,
{
    let by_serde = serde_json::to_value(value).unwrap();
    let by_openapi = value.to_json().unwrap();
    let read: T = serde_json::from_value(by_openapi).unwrap();
    assert_eq!(&read, value);
    let parsed = T::parse_from_json(Some(by_serde)).unwrap();
    assert_eq!(&parsed, value);
}

fn facts() -> Facts {
    Facts {
        hostname: "web-1".into(),
        machine_id: "4c4c4544004d3510".into(),
        distro: Some("debian".into()),
        distro_version: Some("12".into()),
        os_family: Some("debian".into()),
        agent_permissions: Some(vec!["read_inventory".into()]),
        agent_install: Some(AgentInstall {
            method: "apt".into(),
            channel: Some("stable".into()),
        }),
        ..Facts::default()
    }
}

#[test]
fn answers_are_written_alike() {
    let job = Job {
        id: "job_01jdpyb9w6n4v6t2c4xq7w8z3k".into(),
        kind: "apply_updates".into(),
        proposal_id: "prp_06f0000000000000000000000".into(),
        proposal_number: 3,
        reboot: "in_window".into(),
        changes: vec![JobChange {
            package: "openssl".into(),
            ecosystem: "deb".into(),
            from_version: "3.0.15-1~deb12u1".into(),
            to_version: "3.0.17-1~deb12u2".into(),
        }],
        release_upgrade: None,
        window: Some(JobWindow {
            rrule: "FREQ=WEEKLY;BYDAY=SA".into(),
            duration_minutes: 240,
            time_zone: "Europe/Berlin".into(),
        }),
    };
    let upgrade = Job {
        kind: "dist_upgrade".into(),
        release_upgrade: Some(serde_json::json!({"distro": "ubuntu"})),
        window: None,
        ..job.clone()
    };
    agree(&CheckInAnswer {
        next_check_in_s: 300,
        jobs: vec![job, upgrade],
        send_inventory: true,
    });
    let at = Utc.with_ymd_and_hms(2027, 2, 1, 0, 0, 0).single().unwrap();
    agree(&Enrolled {
        host_id: "hst_01jdpyb9w6n4v6t2c4xq7w8z3k".into(),
        key_id: "1f2e".into(),
        certificate: "PEM".into(),
        ca_certificate: "PEM".into(),
        expires_at: at,
        check_in_interval_s: 300,
    });
    agree(&Renewed {
        key_id: "1f2f".into(),
        certificate: "PEM".into(),
        ca_certificate: "PEM".into(),
        expires_at: at,
    });
}

#[test]
fn requests_are_read_alike() {
    read_alike(&CheckIn {
        facts: facts(),
        inventory_digest: "sha256:00".into(),
        packages: Some(vec![Package {
            name: "openssl".into(),
            version: "3.0.15-1~deb12u1".into(),
            arch: "amd64".into(),
            source_name: Some("openssl".into()),
            source_version: None,
        }]),
        updates: Some(vec![Update {
            name: "openssl".into(),
            arch: "amd64".into(),
            from_version: "3.0.15-1~deb12u1".into(),
            to_version: "3.0.17-1~deb12u2".into(),
            ecosystem: "deb".into(),
            source_name: Some("openssl".into()),
            security: true,
            requires_reboot: false,
            advisories: vec![Advisory {
                external_id: "DSA-5000-1".into(),
                source: "debian".into(),
                severity: Some("high".into()),
                title: None,
                url: None,
                cves: vec!["CVE-2025-0001".into()],
            }],
            impact: Some(Impact {
                reboot: false,
                restarts: vec!["nginx.service".into()],
                installs: vec![ImpactInstall {
                    name: "libssl3t64".into(),
                    version: "3.0.17".into(),
                }],
                removes: vec![],
            }),
        }]),
        release_upgrade: None,
        reboot_required: Some(false),
        services_need_restart: Some(vec![]),
        held_packages: None,
    });
    read_alike(&EnrollRequest {
        token: "enr_x".into(),
        csr: "PEM".into(),
        facts: facts(),
        labels: Some([("role".to_owned(), "web".to_owned())].into()),
    });
    read_alike(&JobResult {
        status: JobStatus::Failed,
        log: Some("E: held".into()),
        rebooted: Some(false),
        finished_at: Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).single().unwrap(),
    });
}
