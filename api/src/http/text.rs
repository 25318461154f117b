//! `Text`: a JSON string and nothing else. poem-openapi's `String` also accepts numbers and
//! booleans (`{"name": 5}` becomes `"5"`); request bodies use `Text` so that a value of the
//! wrong type is a 400, as the contract needs (a label is a selector, so its type matters).

use std::{borrow::Cow, ops::Deref};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef},
    types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type},
};
use serde_json::Value;

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text(pub String);

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Type for Text {
    const IS_REQUIRED: bool = true;
    type RawValueType = String;
    type RawElementValueType = String;

    fn name() -> Cow<'static, str> {
        "string".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new("string")))
    }

    fn as_raw_value(&self) -> Option<&String> {
        Some(&self.0)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(std::iter::once(&self.0))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl ParseFromJSON for Text {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(text) => Ok(Text(text)),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl ToJSON for Text {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.0.clone()))
    }
}

/// A [`Text`] whose schema states the shape the handler checks (with `crate::http::input`), so the
/// document declares every bound the code enforces. Parsing is [`Text`]'s: the handler's check
/// stays the one that answers, with its own words.
macro_rules! shaped_text {
    ($(#[$doc:meta])* $name:ident, $schema:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name(pub Text);

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Type for $name {
            const IS_REQUIRED: bool = true;
            type RawValueType = String;
            type RawElementValueType = String;

            fn name() -> Cow<'static, str> {
                "string".into()
            }

            fn schema_ref() -> MetaSchemaRef {
                MetaSchemaRef::Inline(Box::new($schema))
            }

            fn as_raw_value(&self) -> Option<&String> {
                self.0.as_raw_value()
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a String> + 'a> {
                self.0.raw_element_iter()
            }

            fn is_empty(&self) -> bool {
                self.0.0.is_empty()
            }
        }

        impl ParseFromJSON for $name {
            fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
                Text::parse_from_json(value)
                    .map($name)
                    .map_err(ParseError::propagate)
            }
        }

        impl ToJSON for $name {
            fn to_json(&self) -> Option<Value> {
                self.0.to_json()
            }
        }
    };
}

/// Control characters (Unicode `Cc`), which names refuse.
const CONTROL: &str = r"\u0000-\u001F\u007F-\u009F";

fn string(max_length: usize, pattern: Option<String>) -> MetaSchema {
    MetaSchema {
        max_length: Some(max_length),
        pattern,
        ..MetaSchema::new("string")
    }
}

/// At least one character that is not whitespace, and none of `refused` anywhere.
fn not_blank(refused: &str) -> String {
    format!(r"^[^{refused}]*[^\s{refused}][^{refused}]*$")
}

shaped_text!(
    /// A name or title (`crate::http::input::name`): 1–255 characters once trimmed, no control
    /// characters.
    Name,
    string(255, Some(not_blank(CONTROL)))
);

shaped_text!(
    /// An email address (`crate::http::input::Email`): at most 254 characters.
    EmailText,
    MetaSchema {
        format: Some("email"),
        ..string(254, None)
    }
);

shaped_text!(
    /// An organization slug (`crate::http::input::Slug`): 3–40 lowercase letters, digits and hyphens.
    SlugText,
    MetaSchema {
        min_length: Some(3),
        ..string(40, Some("^[a-z0-9-]{3,40}$".to_owned()))
    }
);

shaped_text!(
    /// A role (`crate::http::input::role`).
    RoleText,
    MetaSchema {
        enum_items: ["owner", "admin", "operator", "viewer"]
            .into_iter()
            .map(Value::from)
            .collect(),
        ..MetaSchema::new("string")
    }
);

shaped_text!(
    /// A role an invitation may grant: never owner.
    InvitedRoleText,
    MetaSchema {
        enum_items: ["admin", "operator", "viewer"]
            .into_iter()
            .map(Value::from)
            .collect(),
        ..MetaSchema::new("string")
    }
);

shaped_text!(
    /// Free text that must say something: at most 2,000 characters, not only whitespace.
    Reason,
    string(2000, Some(r"\S".to_owned()))
);

shaped_text!(
    /// A comment: at most 10,000 characters, not only whitespace; line breaks and tabs are the
    /// only control characters kept.
    CommentText,
    string(
        10_000,
        Some(not_blank(r"\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F"))
    )
);

/// Characters that change how text around them is shown (`crate::http::input::is_unshowable`):
/// control characters and Unicode bidirectional embeddings, overrides and isolates.
const UNSHOWABLE: &str = r"\u0000-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069";
/// The same, less line feeds and tabs.
const UNSHOWABLE_BUT_LINES: &str =
    r"\u0000-\u0008\u000B-\u001F\u007F-\u009F\u202A-\u202E\u2066-\u2069";

shaped_text!(
    /// A host's display name: at most 255 characters, nothing [`UNSHOWABLE`].
    DisplayNameText,
    string(255, Some(format!("^[^{UNSHOWABLE}]*$")))
);

shaped_text!(
    /// A host's notes: at most 10,000 characters, nothing [`UNSHOWABLE`] but line feeds and
    /// tabs.
    NotesText,
    string(10_000, Some(format!("^[^{UNSHOWABLE_BUT_LINES}]*$")))
);
