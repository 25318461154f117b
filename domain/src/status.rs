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
