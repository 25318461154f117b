//! Public identifiers (decisions §2): `<prefix>_` followed by the 26 lowercase Crockford base32
//! characters of a UUIDv7, so that ids sort by creation time. Rows store the bare UUID; the
//! prefix names the kind and is checked when an id is parsed.

use uuid::Uuid;

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A fresh UUIDv7.
pub fn new_uuid() -> Uuid {
    Uuid::now_v7()
}

/// Encodes 128 bits as 26 base32 characters (the first carries the top 3 bits).
pub fn encode_base32(uuid: Uuid) -> String {
    let mut value = uuid.as_u128();
    let mut out = [0u8; 26];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(value & 0x1f) as usize];
        value >>= 5;
    }
    // Every byte comes from ALPHABET, which is ASCII.
    out.iter().map(|&b| b as char).collect()
}

/// Decodes 26 lowercase base32 characters; `None` for anything else.
pub fn decode_base32(text: &str) -> Option<Uuid> {
    let bytes = text.as_bytes();
    if bytes.len() != 26 || bytes[0] > b'7' {
        return None;
    }
    let mut value: u128 = 0;
    for &b in bytes {
        let digit = ALPHABET.iter().position(|&a| a == b)? as u128;
        value = (value << 5) | digit;
    }
    Some(Uuid::from_u128(value))
}

/// Formats `uuid` as a public id of kind `prefix` (without the underscore).
pub fn format_id(prefix: &str, uuid: Uuid) -> String {
    format!("{prefix}_{}", encode_base32(uuid))
}

/// Parses a public id of kind `prefix`; `None` when the prefix or shape is wrong.
pub fn parse_id(prefix: &str, text: &str) -> Option<Uuid> {
    let rest = text.strip_prefix(prefix)?.strip_prefix('_')?;
    decode_base32(rest)
}

/// Declares a typed public identifier: `id_type!(HostId, "hst")`.
#[macro_export]
macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub ::uuid::Uuid);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            pub fn new() -> Self {
                Self($crate::ids::new_uuid())
            }

            pub fn parse(text: &str) -> Option<Self> {
                $crate::ids::parse_id($prefix, text).map(Self)
            }

            pub fn uuid(self) -> ::uuid::Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&$crate::ids::format_id($prefix, self.0))
            }
        }

        impl From<::uuid::Uuid> for $name {
            fn from(uuid: ::uuid::Uuid) -> Self {
                Self(uuid)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_sorts_by_creation() {
        let a = new_uuid();
        let b = new_uuid();
        let (ea, eb) = (encode_base32(a), encode_base32(b));
        assert_eq!(ea.len(), 26);
        assert_eq!(decode_base32(&ea), Some(a));
        assert!(ea < eb, "v7 ids must sort by creation: {ea} {eb}");
    }

    #[test]
    fn extremes_encode_exactly() {
        assert_eq!(encode_base32(Uuid::nil()), "0".repeat(26));
        assert_eq!(encode_base32(Uuid::max()), format!("7{}", "z".repeat(25)));
        assert_eq!(
            decode_base32(&format!("7{}", "z".repeat(25))),
            Some(Uuid::max())
        );
    }

    #[test]
    fn wrong_prefix_or_shape_is_refused() {
        let id = format_id("hst", new_uuid());
        assert!(parse_id("hst", &id).is_some());
        assert!(parse_id("grp", &id).is_none());
        assert!(parse_id("hst", "hst_").is_none());
        assert!(parse_id("hst", "hst_8zzzzzzzzzzzzzzzzzzzzzzzzz").is_none());
        assert!(parse_id("hst", &id.to_uppercase()).is_none());
        assert!(parse_id("hst", "hst_0000000000000000000000000u").is_none());
    }
}
