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
    /// openssl 1 → 2 (deb), for tests.
    #[cfg(test)]
    pub(crate) fn example() -> Self {
        ChangeKey {
            package: "openssl".into(),
            ecosystem: "deb".into(),
            from_version: "1".into(),
            to_version: "2".into(),
        }
    }

    /// The update itself, whatever version a host starts from.
    pub fn target(&self) -> (&str, &str, &str) {
        (&self.package, &self.ecosystem, &self.to_version)
    }
}
