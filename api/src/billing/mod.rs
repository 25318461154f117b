//! Plans and billing over HTTP (decisions §9, §17): the payment processor's webhook, the
//! owner's billing and usage, checkout; and `api plan set`, the operator's way to set a plan.
//! The rules (plans, gates, event handling) live in `domain::billing`.

pub mod operator;
