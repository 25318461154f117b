//! What rollouts keep in JSON columns (decisions §20): a policy's `rollout` (and the copy its
//! proposals keep), and the waves a proposal that went ahead was cut into. Shapes only; the
//! rules are `domain::proposals::rollout`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// A number of hosts, or a percentage of a proposal's hosts: `5` or `"25%"` in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Amount {
    Count(u32),
    Percent(u32),
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Count(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Amount {
    /// `"25%"` as a percentage; `None` for anything else. The number may be 0 or over 100:
    /// whether it is allowed is the rule's to say.
    pub fn parse_percent(text: &str) -> Option<Amount> {
        let digits = text.strip_suffix('%')?;
        if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(Amount::Percent)
    }
}

impl Serialize for Amount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Amount::Count(n) => serializer.serialize_u32(*n),
            Amount::Percent(_) => serializer.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Amount;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count of hosts or a percentage such as \"25%\"")
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Amount, E> {
                u32::try_from(n)
                    .map(Amount::Count)
                    .map_err(|_| E::custom("a count too large"))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Amount, E> {
                u32::try_from(n)
                    .map(Amount::Count)
                    .map_err(|_| E::custom("a negative or too large count"))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Amount, E> {
                Amount::parse_percent(text).ok_or_else(|| E::custom("not a percentage"))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// One wave as a policy writes it: a name, a size, and optionally a label selector whose
/// hosts go into it first (canaries).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WaveSpec {
    pub name: String,
    pub size: Amount,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

fn hundred() -> u32 {
    100
}

fn one() -> Amount {
    Amount::Count(1)
}

/// A rollout (`policies.rollout`, `proposals.rollout`). Absent fields take the defaults of
/// decisions §20.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RolloutSpec {
    pub waves: Vec<WaveSpec>,
    #[serde(default)]
    pub soak_minutes: u32,
    #[serde(default = "hundred")]
    pub success_percent: u32,
    #[serde(default = "one")]
    pub halt_after_failures: Amount,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
}

/// A wave as a proposal that went ahead was cut (`proposal_rollouts.waves`): its name and how
/// many of the proposal's hosts it got.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlannedWave {
    pub name: String,
    pub hosts: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_numbers_or_percent_strings() {
        let read = |text: &str| serde_json::from_str::<Amount>(text).ok();
        assert_eq!(read("2"), Some(Amount::Count(2)));
        assert_eq!(read("\"50%\""), Some(Amount::Percent(50)));
        assert_eq!(read("\"50\""), None);
        assert_eq!(read("\"%\""), None);
        assert_eq!(read("\"-5%\""), None);
        assert_eq!(read("-1"), None);
        assert_eq!(read("1.5"), None);
        assert_eq!(
            serde_json::to_string(&Amount::Percent(5)).ok().as_deref(),
            Some("\"5%\"")
        );
        assert_eq!(
            serde_json::to_string(&Amount::Count(5)).ok().as_deref(),
            Some("5")
        );
    }

    #[test]
    fn a_rollout_without_its_optional_fields_takes_the_defaults() {
        let spec: RolloutSpec =
            serde_json::from_str(r#"{"waves":[{"name":"canary","size":1}]}"#).expect("reads");
        assert_eq!(spec.soak_minutes, 0);
        assert_eq!(spec.success_percent, 100);
        assert_eq!(spec.halt_after_failures, Amount::Count(1));
        assert_eq!(spec.max_in_flight, None);
    }
}
