//! Severities as the service names them, and the vocabularies advisory sources use mapped
//! onto them.

/// Severities in increasing order, as the service names them. Advisory sources use several
/// vocabularies; [`rank`] maps them onto this one.
pub const SEVERITIES: [&str; 4] = ["low", "medium", "high", "critical"];

/// The rank (0 = low … 3 = critical) of a severity as an advisory source wrote it; `None` for
/// a value that rates nothing (absent, `unknown`, `none`, anything unrecognised).
pub fn rank(severity: &str) -> Option<u8> {
    match severity.trim().to_ascii_lowercase().as_str() {
        "low" | "negligible" => Some(0),
        "medium" | "moderate" => Some(1),
        "high" | "important" => Some(2),
        "critical" => Some(3),
        _ => None,
    }
}

/// The service's name of a rank (ranks above 3 are critical).
pub fn name(rank: u8) -> &'static str {
    SEVERITIES[usize::from(rank.min(3))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_vocabularies_map_onto_four_ranks() {
        assert_eq!(rank("Important"), Some(2));
        assert_eq!(rank(" moderate "), Some(1));
        assert_eq!(rank("negligible"), Some(0));
        assert_eq!(rank("unknown"), None);
        assert_eq!(name(3), "critical");
        assert_eq!(name(9), "critical");
    }
}
