//! The stored states of proposals, hosts and host jobs as enums.
//!
//! A value this build does not know is kept as `Other(text)` and written back, shown and
//! serialized exactly as stored (decisions §6 and §7: unknown values pass through), so a
//! newer build's state survives an older build reading it. Each converts into a sea-orm
//! `Value`, so queries filter on the enum (`Column::Status.eq(ProposalStatus::Open)`).

/// Defines a string-backed state enum whose unknown values pass through.
macro_rules! pass_through_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A value this build does not know, kept as stored.
            Other(String),
        }

        impl $name {
            /// Every value this build knows.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The stored text.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(text) => text,
                }
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                match $name::from(text.as_str()) {
                    $name::Other(_) => $name::Other(text),
                    known => known,
                }
            }
        }

        impl From<$name> for String {
            fn from(status: $name) -> String {
                match status {
                    $name::Other(text) => text,
                    known => known.as_str().to_owned(),
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<$name> for sea_orm::Value {
            fn from(status: $name) -> sea_orm::Value {
                sea_orm::Value::from(String::from(status))
            }
        }

        impl From<&$name> for sea_orm::Value {
            fn from(status: &$name) -> sea_orm::Value {
                sea_orm::Value::from(status.as_str().to_owned())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map($name::from)
            }
        }
    };
}

/// For the other modules' stored enums (plans).
pub(crate) use pass_through_enum;

pass_through_enum! {
    /// A proposal's status (decisions §7).
    ProposalStatus {
        /// Awaiting approval.
        Open => "open",
        /// Going ahead now: its host jobs exist.
        Approved => "approved",
        /// Approved, waiting for its window to open.
        Scheduled => "scheduled",
        /// An agent has picked up one of its jobs.
        Applying => "applying",
        Applied => "applied",
        PartiallyApplied => "partially_applied",
        Failed => "failed",
        Rejected => "rejected",
        /// Set aside until a time; reopens then.
        Snoozed => "snoozed",
        /// A newer proposal of the same policy carries everything it did.
        Superseded => "superseded",
        /// Nothing left to do.
        Closed => "closed",
    }
}

impl ProposalStatus {
    /// Statuses a proposal never leaves.
    pub const FINAL: [ProposalStatus; 6] = [
        ProposalStatus::Applied,
        ProposalStatus::PartiallyApplied,
        ProposalStatus::Failed,
        ProposalStatus::Rejected,
        ProposalStatus::Superseded,
        ProposalStatus::Closed,
    ];

    /// Statuses whose hosts and changes evaluation still maintains.
    pub const UNDECIDED: [ProposalStatus; 2] = [ProposalStatus::Open, ProposalStatus::Snoozed];

    /// Statuses of a proposal that is going ahead: its changes are not proposed again.
    pub const IN_FLIGHT: [ProposalStatus; 3] = [
        ProposalStatus::Approved,
        ProposalStatus::Scheduled,
        ProposalStatus::Applying,
    ];

    /// The status of a stored proposal.
    pub fn of(proposal: &entities::proposals::Model) -> ProposalStatus {
        ProposalStatus::from(proposal.status.as_str())
    }

    pub fn is_final(&self) -> bool {
        ProposalStatus::FINAL.contains(self)
    }

    pub fn is_in_flight(&self) -> bool {
        ProposalStatus::IN_FLIGHT.contains(self)
    }
}

pass_through_enum! {
    /// A host's status (decisions §6).
    HostStatus {
        /// Enrolled, never checked in.
        Pending => "pending",
        Online => "online",
        /// No check-in for three intervals.
        Offline => "offline",
        Decommissioned => "decommissioned",
    }
}

pass_through_enum! {
    /// A host job's status: created `pending`, `dispatched` once its agent fetched it, then
    /// what the agent reported; `cancelled` when it was withdrawn before it ran (its host left
    /// the proposal: decommissioned, or no longer needing the change).
    HostJobStatus {
        Pending => "pending",
        Dispatched => "dispatched",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl HostJobStatus {
    /// Statuses of a job its agent has not reported on yet.
    pub const UNFINISHED: [HostJobStatus; 2] = [HostJobStatus::Pending, HostJobStatus::Dispatched];
}

pass_through_enum! {
    /// Where a proposal's rollout is (decisions §20).
    RolloutState {
        /// Its next wave waits: for the proposal's window to open (scheduled), or, its wave
        /// done and soaked, for the window of a window-bound policy.
        Waiting => "waiting",
        /// Its current wave's hosts are getting their jobs.
        Running => "running",
        /// Its current wave is done; the soak time runs.
        Soaking => "soaking",
        /// No new jobs until someone resumes it.
        Halted => "halted",
        /// Every wave is done.
        Done => "done",
    }
}

pass_through_enum! {
    /// What a person decided on a proposal (`proposal_decisions.decision`).
    Decision {
        Approved => "approved",
        Rejected => "rejected",
        Snoozed => "snoozed",
    }
}

pass_through_enum! {
    /// When a policy's approved changes go out (`policies.apply`, `proposals.apply`).
    Apply {
        /// As soon as the proposal is approved.
        Asap => "asap",
        /// As soon as it is approved and the maintenance window is open.
        AsapInWindow => "asap_in_window",
    }
}

pass_through_enum! {
    /// What approving lets a job do about reboots (`policies.reboot`, `proposals.reboot`, a
    /// job's payload).
    Reboot {
        Never => "never",
        /// Right after applying, when the host needs it.
        Immediate => "immediate",
        /// When the host needs it, only inside the maintenance window.
        InWindow => "in_window",
    }
}

pass_through_enum! {
    /// Which updates a policy proposes (`policies.updates`).
    Coverage {
        /// Every available update, and release upgrades.
        All => "all",
        /// Only updates that fix an advisory or that the distribution marks as security.
        Security => "security",
    }
}

pass_through_enum! {
    /// What a proposal proposes (`proposals.kind`).
    ProposalKind {
        PackageUpdate => "package_update",
        /// Every change fixes an advisory or is marked security.
        SecurityUpdate => "security_update",
        /// A release upgrade.
        DistUpgrade => "dist_upgrade",
    }
}

pass_through_enum! {
    /// What a host job does (`host_jobs.kind`): apply package updates, a release upgrade, or
    /// the reboot that follows either (decisions §20).
    JobKind {
        ApplyUpdates => "apply_updates",
        DistUpgrade => "dist_upgrade",
        Reboot => "reboot",
    }
}

pass_through_enum! {
    /// What happened to a host (`host_events.kind`).
    HostEventKind {
        Enrolled => "enrolled",
        /// It checked in after three intervals of silence.
        CheckedInAfterGap => "checked_in_after_gap",
        /// The sweep found it silent for three intervals.
        WentOffline => "went_offline",
        LabelsChanged => "labels_changed",
        /// Its agent reported a job's result.
        JobRan => "job_ran",
        Decommissioned => "decommissioned",
    }
}

pass_through_enum! {
    /// Where a notification delivery is (`notification_deliveries.status`): pending until
    /// delivered, failed or skipped.
    DeliveryStatus {
        Pending => "pending",
        Delivered => "delivered",
        Failed => "failed",
        Skipped => "skipped",
    }
}

pass_through_enum! {
    /// A cached changelog's status (`changelogs.status`), interface.md's names.
    ChangelogStatus {
        /// Not fetched yet.
        Pending => "pending",
        Found => "found",
        /// None to be had for this version.
        Missing => "missing",
    }
}

pass_through_enum! {
    /// The package ecosystem of a change (`proposal_changes.ecosystem`, `host_updates`).
    Ecosystem {
        Deb => "deb",
        Rpm => "rpm",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_value_reads_back_as_itself() {
        for status in ProposalStatus::KNOWN {
            assert_eq!(&ProposalStatus::from(status.as_str()), status);
        }
        for status in HostStatus::KNOWN {
            assert_eq!(&HostStatus::from(status.as_str()), status);
        }
        for status in HostJobStatus::KNOWN {
            assert_eq!(&HostJobStatus::from(status.as_str()), status);
        }
    }

    #[test]
    fn an_unknown_stored_value_passes_through_unchanged() {
        let status = ProposalStatus::from("rolling_back");
        assert_eq!(status, ProposalStatus::Other("rolling_back".into()));
        assert_eq!(status.to_string(), "rolling_back");
        assert_eq!(String::from(status.clone()), "rolling_back");
        assert_eq!(
            serde_json::to_value(&status).ok(),
            Some(serde_json::json!("rolling_back"))
        );
        assert_eq!(
            serde_json::from_value::<ProposalStatus>(serde_json::json!("rolling_back")).ok(),
            Some(status)
        );
        assert!(!ProposalStatus::from("rolling_back").is_final());
        assert_eq!(
            sea_orm::Value::from(HostStatus::from("retired")),
            sea_orm::Value::from("retired".to_owned())
        );
    }

    #[test]
    fn known_values_serialize_as_their_stored_text() {
        assert_eq!(
            serde_json::to_value(ProposalStatus::PartiallyApplied).ok(),
            Some(serde_json::json!("partially_applied"))
        );
        assert_eq!(
            sea_orm::Value::from(HostJobStatus::Dispatched),
            sea_orm::Value::from("dispatched".to_owned())
        );
        assert!(ProposalStatus::Superseded.is_final());
        assert!(ProposalStatus::Scheduled.is_in_flight());
        assert!(!ProposalStatus::Snoozed.is_in_flight());
    }
}
