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

/// Formats `uuid` as a public id of kind `prefix` (without the underscore). Code outside this
/// module names an id by its type ([`HostId`], …), never by a prefix string: clippy refuses a
/// call anywhere else (`clippy.toml`).
pub fn format_id(prefix: &str, uuid: Uuid) -> String {
    format!("{prefix}_{}", encode_base32(uuid))
}

/// Parses a public id of kind `prefix`; `None` when the prefix or shape is wrong. As with
/// [`format_id`], only the id types call it.
pub fn parse_id(prefix: &str, text: &str) -> Option<Uuid> {
    let rest = text.strip_prefix(prefix)?.strip_prefix('_')?;
    decode_base32(rest)
}

/// What the id types' expansions need, reachable whatever the calling crate depends on.
#[doc(hidden)]
pub mod __private {
    #[cfg(feature = "openapi")]
    pub use poem_openapi;
    pub use sea_orm;
    pub use serde;
    pub use serde_json;
}

/// Declares a typed public identifier: `id_type!(HostId, "hst")`.
///
/// The type wraps the row's UUID; it prints and parses as `<prefix>_<26 base32 characters>`
/// (`Display`, `parse`, serde), compares in queries as the bare UUID (`Into<sea_orm::Value>`),
/// and, with platform's `openapi` feature, is a poem-openapi string type whose schema states the
/// pattern. A path parameter of this type that does not parse is poem-openapi's
/// `ParsePathError`, which the api answers 404 `not-found` (decisions §2).
#[macro_export]
macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub ::uuid::Uuid);

        impl $name {
            pub const PREFIX: &'static str = $prefix;
            /// The shape of the id, as the OpenAPI document states it.
            pub const PATTERN: &'static str =
                concat!("^", $prefix, "_[0-7][0-9a-hjkmnp-tv-z]{25}$");

            pub fn new() -> Self {
                Self($crate::ids::new_uuid())
            }

            /// The id `text` names; `None` for another kind or a wrong shape.
            #[allow(clippy::disallowed_methods)]
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
            #[allow(clippy::disallowed_methods)]
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&$crate::ids::format_id($prefix, self.0))
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(self, f)
            }
        }

        impl From<::uuid::Uuid> for $name {
            fn from(uuid: ::uuid::Uuid) -> Self {
                Self(uuid)
            }
        }

        impl From<$name> for ::uuid::Uuid {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl From<$name> for $crate::ids::__private::sea_orm::Value {
            fn from(id: $name) -> Self {
                id.0.into()
            }
        }

        impl $crate::ids::__private::serde::Serialize for $name {
            fn serialize<S: $crate::ids::__private::serde::Serializer>(
                &self,
                serializer: S,
            ) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> $crate::ids::__private::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::ids::__private::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as $crate::ids::__private::serde::Deserialize>::deserialize(deserializer)?;
                Self::parse(&text).ok_or_else(|| {
                    <D::Error as $crate::ids::__private::serde::de::Error>::custom(concat!(
                        "not a ",
                        $prefix,
                        "_ id"
                    ))
                })
            }
        }

        $crate::__id_openapi!($name, $prefix);
    };
}

/// The poem-openapi side of [`id_type!`]: a string with the id's pattern.
#[cfg(feature = "openapi")]
#[doc(hidden)]
#[macro_export]
macro_rules! __id_openapi {
    ($name:ident, $prefix:literal) => {
        impl $crate::ids::__private::poem_openapi::types::Type for $name {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> ::std::borrow::Cow<'static, str> {
                concat!("string_", $prefix, "_id").into()
            }

            fn schema_ref() -> $crate::ids::__private::poem_openapi::registry::MetaSchemaRef {
                use $crate::ids::__private::poem_openapi::registry::{MetaSchema, MetaSchemaRef};
                MetaSchemaRef::Inline(Box::new(MetaSchema {
                    pattern: Some(Self::PATTERN.to_owned()),
                    ..MetaSchema::new("string")
                }))
            }

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(::std::iter::once(self))
            }
        }

        impl $crate::ids::__private::poem_openapi::types::ParseFromParameter for $name {
            fn parse_from_parameter(
                value: &str,
            ) -> $crate::ids::__private::poem_openapi::types::ParseResult<Self> {
                Self::parse(value).ok_or_else(|| {
                    $crate::ids::__private::poem_openapi::types::ParseError::custom(concat!(
                        "not a ", $prefix, "_ id"
                    ))
                })
            }
        }

        impl $crate::ids::__private::poem_openapi::types::ParseFromJSON for $name {
            fn parse_from_json(
                value: Option<$crate::ids::__private::serde_json::Value>,
            ) -> $crate::ids::__private::poem_openapi::types::ParseResult<Self> {
                use $crate::ids::__private::poem_openapi::types::ParseError;
                match value {
                    Some($crate::ids::__private::serde_json::Value::String(text)) => {
                        Self::parse(&text)
                            .ok_or_else(|| ParseError::custom(concat!("not a ", $prefix, "_ id")))
                    }
                    other => Err(ParseError::expected_type(other.unwrap_or_default())),
                }
            }
        }

        impl $crate::ids::__private::poem_openapi::types::ToJSON for $name {
            fn to_json(&self) -> Option<$crate::ids::__private::serde_json::Value> {
                Some($crate::ids::__private::serde_json::Value::String(
                    self.to_string(),
                ))
            }
        }
    };
}

#[cfg(not(feature = "openapi"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __id_openapi {
    ($name:ident, $prefix:literal) => {};
}

// The kinds of public id (decisions §2), each declared once. Rows store the bare UUID; these
// types are how every crate formats, parses and compares them.
id_type!(
    /// An organization. Paths address organizations by slug; this id never leaves the service.
    OrgId,
    "org"
);
id_type!(
    /// A person's account, and so a member of an organization.
    AccountId,
    "usr"
);
id_type!(HostId, "hst");
id_type!(GroupId, "grp");
id_type!(PolicyId, "pol");
id_type!(ProposalId, "prp");
id_type!(CommentId, "cmt");
id_type!(
    /// A job for one host's agent.
    HostJobId,
    "job"
);
id_type!(HostEventId, "evt");
id_type!(
    /// An API token's record (its value is `sat_…`).
    ApiTokenId,
    "atk"
);
id_type!(
    /// An enrollment token's record (its value is `enr_…`).
    EnrollmentTokenId,
    "etk"
);
id_type!(InvitationId, "inv");
id_type!(AuditEventId, "aud");
id_type!(
    /// A notification channel.
    ChannelId,
    "nch"
);
id_type!(
    /// One notification event sent to one channel; the `webhook-id` of a webhook delivery.
    DeliveryId,
    "dlv"
);
id_type!(
    /// A group an identity provider provisioned through SCIM.
    ScimGroupId,
    "scg"
);

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
    fn typed_ids_print_parse_and_serialize_as_their_prefixed_string() {
        let id = HostId::new();
        let text = id.to_string();
        assert!(text.starts_with("hst_") && text.len() == 30, "{text}");
        assert_eq!(HostId::parse(&text), Some(id));
        assert_eq!(GroupId::parse(&text), None);
        assert_eq!(format!("{id:?}"), text);
        let json = serde_json::to_string(&id).unwrap_or_default();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<HostId>(&json).ok(), Some(id));
        assert!(serde_json::from_str::<ProposalId>(&json).is_err());
        let pattern = HostId::PATTERN;
        assert_eq!(pattern, "^hst_[0-7][0-9a-hjkmnp-tv-z]{25}$");
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
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
