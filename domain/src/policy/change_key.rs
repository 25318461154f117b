//! What makes two changes the same change, for grouping, planning and storing them.

/// What makes two changes the same change.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangeKey {
    pub package: String,
    pub ecosystem: String,
    pub from_version: String,
    pub to_version: String,
}

impl ChangeKey {
    /// The update itself, whatever version a host starts from.
    pub fn target(&self) -> (&str, &str, &str) {
        (&self.package, &self.ecosystem, &self.to_version)
    }
}
