//! The rules a new proposal is opened under, copied from its policy so that a later policy
//! change does not move an open proposal.

use entities::{
    json::{JsonText, ProposalWindow, RolloutSpec},
    policies,
};
use uuid::Uuid;

use crate::window::{self, UnreadableWindow};

/// What a proposal copies from its policy when it opens.
#[derive(Clone, Debug)]
pub struct Rules {
    pub org_id: Uuid,
    pub policy_id: Uuid,
    pub name: String,
    pub version: i32,
    pub required: i32,
    pub apply: String,
    /// The window as a proposal stores it.
    pub window: Option<JsonText<ProposalWindow>>,
    pub reboot: String,
    pub auto_merge: bool,
    /// The rollout as the policy stores it (copied as text: it is read when the proposal goes
    /// ahead).
    pub rollout: Option<JsonText<RolloutSpec>>,
}

impl Rules {
    /// The rules of `policy`; an error when its window cannot be read, so that no proposal
    /// opens as if the policy had none.
    pub fn of(policy: &policies::Model) -> Result<Rules, UnreadableWindow> {
        let window = window::of_policy(policy.window.as_ref(), policy.created_at)?
            .map(|w| JsonText::new(&w))
            .transpose()?;
        Ok(Rules {
            org_id: policy.org_id,
            policy_id: policy.id,
            name: policy.name.clone(),
            version: policy.version,
            required: policy.required_approvals,
            apply: policy.apply.clone(),
            window,
            reboot: policy.reboot.clone(),
            auto_merge: policy.auto_merge,
            rollout: policy.rollout.clone(),
        })
    }
}
