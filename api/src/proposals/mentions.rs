//! Whom a comment can mention (decisions §22): the organization's members, searched by the
//! start of what follows an `@`, for completion while a comment is written. Those who may
//! comment may read it (operator and above): a mention already resolves any member's
//! address or name, so this shows nobody more than a comment could name.

use entities::{accounts, memberships};
use platform::ids::AccountId;
use poem_openapi::{OpenApi, param::Query, payload::Json};
use sea_orm::{
    Condition, QueryFilter,
    sea_query::{Expr, ExprTrait, Func},
};

use super::comments::CommentPerson;
use crate::{
    AppState,
    http::access::org,
    http::error::{ApiError, OrgInputErrors},
    http::paging::{Order, Page, Paging},
    http::rights::Discuss,
    http::tags::Tag,
};

/// `text` lowercased with LIKE's wildcards escaped (`\` is the escape character).
fn like_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().flat_map(char::to_lowercase) {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub struct MentionsApi;

#[OpenApi(tag = "Tag::Comments")]
impl MentionsApi {
    /// Members a comment can mention, in the order they joined: those whose email address or
    /// display name contains `q` (compared without regard to case; every member without
    /// `q`). For completing an `@` mention while writing; the comment itself resolves
    /// mentions as `createComment` says. Operator and above, as for comments.
    #[oai(
        path = "/v1/orgs/:org/mentionable",
        method = "get",
        operation_id = "listMentionable"
    )]
    async fn list(
        &self,
        org: org::Path<Discuss>,
        state: poem::web::Data<&AppState>,
        /// Text in the member's address or name.
        #[oai(validator(max_length = 255))]
        q: Query<Option<String>>,
        /// At most this many (default 50, at most 500).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> Result<Json<Page<CommentPerson>>, OrgInputErrors> {
        let paging = Paging::new(limit.0, cursor.0.as_deref())?;
        let mut query = paging.apply(
            org.scope().rows::<memberships::Entity>(),
            memberships::Column::AccountId,
            Order::OldestFirst,
        );
        if let Some(q) = q.0.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            let pattern = format!("%{}%", like_escaped(q));
            let lower = |column: accounts::Column| {
                Expr::expr(Func::lower(Expr::col((accounts::Entity, column))))
            };
            query = query.filter(
                Condition::any()
                    .add(
                        lower(accounts::Column::Email)
                            .like(sea_orm::sea_query::LikeExpr::new(pattern.as_str()).escape('\\')),
                    )
                    .add(
                        lower(accounts::Column::Name)
                            .like(sea_orm::sea_query::LikeExpr::new(pattern.as_str()).escape('\\')),
                    ),
            );
        }
        let rows: Vec<_> = query
            .find_also_related(accounts::Entity)
            .all(&state.db.orm)
            .await
            .map_err(ApiError::from)?
            .into_iter()
            .filter_map(|(m, a)| a.map(|a| (m, a)))
            .collect();
        let rows = paging.cut(rows, |(m, _)| m.account_id);
        Ok(Json(rows.page(|(_, a)| CommentPerson {
            id: AccountId::from(a.id),
            email: a.email,
            name: a.name,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::like_escaped;

    #[test]
    fn wildcards_in_the_search_are_taken_literally() {
        assert_eq!(like_escaped("Ada_L%"), "ada\\_l\\%");
        assert_eq!(like_escaped("a\\b"), "a\\\\b");
    }
}
