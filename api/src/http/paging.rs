//! Paged lists (decisions §5): `{"items": [...], "next_cursor": string|null}`, `?limit=`
//! (default 50, at most 500) and an opaque `?cursor=`. Cursors are the last row's key (a
//! UUIDv7, so lists run by creation), so a page is an index range scan however deep it is.
//!
//! Every paged list goes through [`Paging`]: `Paging::new(limit, cursor)?` checks both
//! parameters, then either `paging.fetch(db, query, order)` for a list of one table's rows
//! (keyed by the table's UUID key) or, for a query of two tables, `paging.apply(query, key, order)` and `paging.cut(rows, key)`;
//! [`Rows::page`] makes the rows items ([`Rows::try_page`] when making one can fail, as
//! reading a stored JSON column can: the first failure is the answer).

use poem_openapi::{
    Object,
    types::{ParseFromJSON, ToJSON},
};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, Iterable, ModelTrait, PrimaryKeyToColumn,
    QueryFilter, QueryOrder, QuerySelect, Select, sea_query::ValueType,
};
use uuid::Uuid;

use crate::http::error::ApiError;

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

/// Which way a list runs along its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    OldestFirst,
    NewestFirst,
}

/// A list operation's `limit` and `cursor`, checked.
#[derive(Clone, Copy, Debug)]
pub struct Paging {
    limit: u32,
    /// The key of the previous page's last row.
    after: Option<Uuid>,
}

/// A list's `limit`: 1–500, 50 when absent; 400 `invalid-request` otherwise.
pub fn checked_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        ))),
    }
}

/// A list's `cursor` read by `decode`: absent or empty is the first page; one `decode` does
/// not accept (not one this service gave out) is 400 `invalid-request`.
pub fn checked_cursor<T>(
    cursor: Option<&str>,
    decode: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, ApiError> {
    match cursor {
        None | Some("") => Ok(None),
        Some(text) => decode(text)
            .map(Some)
            .ok_or_else(|| ApiError::invalid("cursor is not one this service gave out")),
    }
}

impl Paging {
    /// `limit` must be 1–500 (absent: 50); `cursor` must be one this service gave out (absent
    /// or empty: the first page). Either is 400 `invalid-request` otherwise.
    pub fn new(limit: Option<u32>, cursor: Option<&str>) -> Result<Self, ApiError> {
        Ok(Paging {
            limit: checked_limit(limit)?,
            after: checked_cursor(cursor, platform::ids::decode_base32)?,
        })
    }

    /// `query` ordered by `key`, from after the cursor, asking for one row more than a page
    /// (the extra row only says that more exist).
    pub fn apply<Q, K>(&self, query: Q, key: K, order: Order) -> Q
    where
        Q: QueryFilter + QueryOrder + QuerySelect,
        K: ColumnTrait,
    {
        let query = match (order, self.after) {
            (Order::OldestFirst, Some(after)) => query.filter(key.gt(after)),
            (Order::NewestFirst, Some(before)) => query.filter(key.lt(before)),
            (_, None) => query,
        };
        let query = match order {
            Order::OldestFirst => query.order_by_asc(key),
            Order::NewestFirst => query.order_by_desc(key),
        };
        query.limit(u64::from(self.limit) + 1)
    }

    /// The page out of the rows [`Paging::apply`]'s query fetched; `key` reads a row's key.
    pub fn cut<R>(&self, mut rows: Vec<R>, key: impl Fn(&R) -> Uuid) -> Rows<R> {
        let next_cursor = self.truncate(&mut rows).map(|last| cursor(key(last)));
        Rows { rows, next_cursor }
    }

    /// Cuts `rows` to a page; its last row when more exist.
    fn truncate<'r, R>(&self, rows: &'r mut Vec<R>) -> Option<&'r R> {
        let more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        rows.last().filter(|_| more)
    }

    /// A page of one table's rows: `query` (filtered as the list needs) ordered and cut by the
    /// table's key, one UUID column (ids are UUIDv7, so key order is creation order).
    pub async fn fetch<E, C>(
        &self,
        db: &C,
        query: Select<E>,
        order: Order,
    ) -> Result<Rows<E::Model>, ApiError>
    where
        E: EntityTrait,
        C: ConnectionTrait,
    {
        let key = E::PrimaryKey::iter()
            .next()
            .map(PrimaryKeyToColumn::into_column)
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("a listed table has no key")))?;
        let mut rows = self.apply(query, key, order).all(db).await?;
        let next_cursor = match self.truncate(&mut rows) {
            None => None,
            Some(last) => Some(cursor(
                <Uuid as ValueType>::try_from(last.get(key)).map_err(|_| {
                    ApiError::Internal(anyhow::anyhow!("a list's key column is not a UUID"))
                })?,
            )),
        };
        Ok(Rows { rows, next_cursor })
    }
}

/// The cursor after the row of key `key`.
fn cursor(key: Uuid) -> String {
    platform::ids::encode_base32(key)
}

/// One page of rows, before they are made items.
pub struct Rows<R> {
    /// At most `limit` rows, in the list's order.
    pub rows: Vec<R>,
    next_cursor: Option<String>,
}

impl<R> Rows<R> {
    /// The page, each row made an item.
    pub fn page<T: ParseFromJSON + ToJSON>(self, item: impl FnMut(R) -> T) -> Page<T> {
        Page {
            items: self.rows.into_iter().map(item).collect(),
            next_cursor: self.next_cursor,
        }
    }

    /// The page, each row made an item by `item`, which can fail; its first error is the
    /// answer (no page leaves a row out).
    pub fn try_page<T: ParseFromJSON + ToJSON, E>(
        self,
        item: impl FnMut(R) -> Result<T, E>,
    ) -> Result<Page<T>, E> {
        Ok(Page {
            items: self.rows.into_iter().map(item).collect::<Result<_, E>>()?,
            next_cursor: self.next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_one_to_five_hundred_and_cursor_is_one_given_out() {
        assert!(Paging::new(Some(0), None).is_err());
        assert!(Paging::new(Some(MAX_LIMIT + 1), None).is_err());
        assert_eq!(Paging::new(None, None).map(|p| p.limit).ok(), Some(50));
        assert_eq!(
            Paging::new(Some(500), Some("")).map(|p| p.limit).ok(),
            Some(500)
        );
        assert!(Paging::new(None, Some("hst_not-a-cursor")).is_err());
        let key = platform::ids::new_uuid();
        let paging = Paging::new(Some(1), Some(&cursor(key))).ok();
        assert_eq!(paging.and_then(|p| p.after), Some(key));
    }

    #[test]
    fn a_page_has_a_cursor_only_when_more_rows_exist() {
        let keys: Vec<Uuid> = (0..3).map(|_| platform::ids::new_uuid()).collect();
        let Ok(paging) = Paging::new(Some(2), None) else {
            panic!("limit 2 is valid");
        };
        let rows = paging.cut(keys.clone(), |k| *k);
        assert_eq!(rows.rows, keys[..2]);
        assert_eq!(rows.next_cursor, Some(cursor(keys[1])));
        let last = paging.cut(keys[..2].to_vec(), |k| *k);
        assert_eq!(last.next_cursor, None);
        let page = last.page(|k| k.to_string());
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.next_cursor, None);
    }

    #[test]
    fn a_page_whose_item_cannot_be_made_is_the_error_not_a_shorter_page() {
        let keys: Vec<Uuid> = (0..3).map(|_| platform::ids::new_uuid()).collect();
        let Ok(paging) = Paging::new(Some(2), None) else {
            panic!("limit 2 is valid");
        };
        let made = paging
            .cut(keys.clone(), |k| *k)
            .try_page(|k| Ok::<_, String>(k.to_string()));
        assert!(made.is_ok_and(|p| p.items.len() == 2 && p.next_cursor.is_some()));
        let broken = keys[1];
        let failed = paging.cut(keys, |k| *k).try_page(|k| {
            if k == broken {
                Err("unreadable")
            } else {
                Ok(k.to_string())
            }
        });
        assert_eq!(failed.err(), Some("unreadable"));
    }
}
