//! Update intelligence (decisions §16): Debian-family changelogs for every change, the
//! known-exploited catalogue, agent release channels. Shared by every organization: nothing
//! here holds tenant data.

pub mod cache;
pub mod changelog;
pub mod jobs;
pub mod kev;
pub mod releases;
