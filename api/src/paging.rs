//! Paged lists (decisions §5): `{"items": [...], "next_cursor": string|null}`, `?limit=`
//! (default 50, at most 500) and an opaque `?cursor=`. Cursors are the last row's id, so a
//! page is an index range scan however deep it is.

use poem_openapi::{
    Object,
    types::{ParseFromJSON, ToJSON},
};
use uuid::Uuid;

use crate::error::ApiError;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// A page of a list.
#[derive(Object)]
pub struct Page<T: ParseFromJSON + ToJSON> {
    pub items: Vec<T>,
    /// Pass as `cursor` to get the next page; null on the last page.
    #[oai(nullable)]
    pub next_cursor: Option<String>,
}

impl<T: ParseFromJSON + ToJSON> Page<T> {
    /// Builds a page from up to `limit + 1` rows (the extra row only says that more exist).
    pub fn from_rows<R>(
        mut rows: Vec<R>,
        limit: u32,
        id: impl Fn(&R) -> Uuid,
        item: impl FnMut(R) -> T,
    ) -> Page<T> {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = if more {
            rows.last().map(|row| Cursor::encode(id(row)))
        } else {
            None
        };
        Page {
            items: rows.into_iter().map(item).collect(),
            next_cursor,
        }
    }
}

pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        ))),
    }
}

pub struct Cursor;

impl Cursor {
    pub fn encode(id: Uuid) -> String {
        platform::ids::encode_base32(id)
    }

    pub fn decode(cursor: Option<&str>) -> Result<Option<Uuid>, ApiError> {
        match cursor {
            None | Some("") => Ok(None),
            Some(text) => platform::ids::decode_base32(text)
                .map(Some)
                .ok_or_else(|| ApiError::invalid("cursor is not one this service gave out")),
        }
    }
}
