//! Comments on proposals, with mentions.
//!
//! A thread is read a page at a time from its newest end: the 50 most recent comments (or the
//! 50 before a given comment), oldest first, with the exact `total`. A comment's mentions are
//! resolved against the organization's members when it is written and stored with it, so a
//! later rename or departure does not rewrite history. Each mentioned member (but the author)
//! is emailed once the comment is committed.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use entities::{
    accounts, comments,
    json::{JsonText, Mention},
    memberships,
};
use platform::ids::{AccountId, CommentId, ProposalId};
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::{Path, Query},
    payload::Json,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use uuid::Uuid;

use crate::http::error::OrgInputErrors;
use crate::{
    AppState, http::access::org, http::error::ApiError, http::rights::Discuss, http::tags::Tag,
    http::text::CommentText, identity::audit::Entry,
};
use entities::scope::{OrgScope, Untenanted};

/// Longest comment body, in characters (after trimming).
pub const MAX_BODY: usize = 10_000;
/// Comments in one page of a thread (decisions §5).
pub const PAGE: u64 = 50;

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct NewComment {
    /// The comment: 1–10,000 characters once leading and trailing whitespace is trimmed; line
    /// breaks and tabs are kept, other control characters are refused. `@email` or `@name`
    /// mentions a member of the organization (see the operation).
    pub body: CommentText,
}

/// A member as a comment shows them: its author or somebody it mentions.
#[derive(Object, Clone, Debug, PartialEq, Eq)]
pub struct CommentPerson {
    /// The account's id (`usr_`).
    pub id: AccountId,
    pub email: String,
    /// Display name; null when they have not set one.
    #[oai(nullable)]
    pub name: Option<String>,
}

impl From<Mention> for CommentPerson {
    fn from(m: Mention) -> CommentPerson {
        CommentPerson {
            id: m.id,
            email: m.email,
            name: m.name,
        }
    }
}

impl From<CommentPerson> for Mention {
    fn from(p: CommentPerson) -> Mention {
        Mention {
            id: p.id,
            email: p.email,
            name: p.name,
        }
    }
}

/// A comment on a proposal.
#[derive(Object)]
pub struct Comment {
    /// `cmt_` id; ids sort by writing order.
    pub id: CommentId,
    pub body: String,
    pub written_at: DateTime<Utc>,
    pub author: CommentPerson,
    /// The members it mentions, as resolved when it was written, in order of first mention;
    /// always present, empty when none.
    pub mentions: Vec<CommentPerson>,
}

/// One page of a proposal's comment thread.
#[derive(Object)]
pub struct CommentList {
    /// Oldest first: the 50 most recent comments (before `before`, when given).
    pub comments: Vec<Comment>,
    /// All comments on the proposal, including any outside this page.
    pub total: i64,
}

#[derive(ApiResponse)]
pub enum Created {
    /// Written; mentioned members are emailed.
    #[oai(status = 201)]
    Created(Json<Comment>),
}

type CommentErrors = OrgInputErrors;

fn person(account: &accounts::Model) -> CommentPerson {
    CommentPerson {
        id: AccountId::from(account.id),
        email: account.email.clone(),
        name: account.name.clone(),
    }
}

fn comment_view(row: comments::Model, author: CommentPerson) -> Result<Comment, ApiError> {
    Ok(Comment {
        id: CommentId::from(row.id),
        mentions: row
            .mentions
            .read()?
            .into_iter()
            .map(CommentPerson::from)
            .collect(),
        body: row.body,
        written_at: row.written_at,
        author,
    })
}

/// The body as stored: trimmed, 1–10,000 characters, no control characters but line breaks
/// and tabs (a NUL could not even be stored in Postgres).
fn comment_body(raw: &str) -> Result<String, ApiError> {
    let value = raw.trim();
    if value.is_empty() {
        return Err(ApiError::invalid("body must not be empty"));
    }
    if value.chars().count() > MAX_BODY {
        return Err(ApiError::invalid(format!(
            "body must be at most {MAX_BODY} characters"
        )));
    }
    if value
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(ApiError::invalid(
            "body must not contain control characters other than line breaks and tabs",
        ));
    }
    Ok(value.to_owned())
}

// ---------------------------------------------------------------------------------------------
// Mentions.

/// Whether `c` carries on a word or an address, so that an `@` after it is not a mention
/// (`ops@example.com` in running text mentions nobody).
fn continues_word(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '+' | '.' | '@')
}

/// Whether a mention may end just before `rest`: at the end of the text, or before a character
/// that does not carry the word on. A full stop ends it unless a letter or digit follows
/// (`@ada.` mentions Ada; `@ada.lovelace` does not).
fn ends_at_boundary(rest: &str) -> bool {
    let mut chars = rest.chars();
    match chars.next() {
        None => true,
        Some('.') => !chars
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_'),
        Some(c) => !(c.is_alphanumeric() || matches!(c, '_' | '-' | '+' | '@')),
    }
}

fn lowercase(text: &str) -> String {
    text.chars().flat_map(char::to_lowercase).collect()
}

/// What an `@` may be followed by: members' addresses and display names, lowercased, each to
/// the member it names, or to nobody when a name is shared by several members.
struct Mentionable {
    keys: HashMap<String, Option<usize>>,
    /// The longest key, in characters.
    longest: usize,
}

impl Mentionable {
    fn new<'a>(people: impl IntoIterator<Item = (usize, &'a str, Option<&'a str>)>) -> Self {
        let mut keys: HashMap<String, Option<usize>> = HashMap::new();
        let mut add = |key: String, who: usize| {
            keys.entry(key)
                .and_modify(|seen| {
                    if *seen != Some(who) {
                        *seen = None;
                    }
                })
                .or_insert(Some(who));
        };
        for (who, email, name) in people {
            add(lowercase(email), who);
            if let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) {
                add(lowercase(name), who);
            }
        }
        let longest = keys.keys().map(|k| k.chars().count()).max().unwrap_or(0);
        Mentionable { keys, longest }
    }

    /// The longest key `rest` starts with (case-insensitively) that ends at a boundary: its
    /// length in bytes of `rest`, and whom it names.
    fn longest_at(&self, rest: &str) -> Option<(usize, Option<usize>)> {
        let mut lowered = String::new();
        let mut best = None;
        // Lowercasing never shortens a character, so `longest` characters of the text suffice.
        for (i, c) in rest.char_indices().take(self.longest) {
            lowered.extend(c.to_lowercase());
            let end = i + c.len_utf8();
            if ends_at_boundary(&rest[end..])
                && let Some(who) = self.keys.get(&lowered)
            {
                best = Some((end, *who));
            }
        }
        best
    }
}

/// Whether `body` has an `@` that could start a mention (to skip loading the members).
fn may_mention(body: &str) -> bool {
    mention_starts(body).next().is_some()
}

/// Byte offsets of each `@` that starts a word.
fn mention_starts(body: &str) -> impl Iterator<Item = usize> + '_ {
    let mut prev: Option<char> = None;
    body.char_indices().filter_map(move |(i, c)| {
        let starts = c == '@' && !prev.is_some_and(continues_word);
        prev = Some(c);
        starts.then_some(i)
    })
}

/// The members `body` mentions, each once, in order of first mention.
fn resolve_mentions(body: &str, mentionable: &Mentionable) -> Vec<usize> {
    let mut found = Vec::new();
    let mut consumed = 0;
    for at in mention_starts(body) {
        if at < consumed {
            continue;
        }
        let start = at + 1;
        if let Some((len, who)) = mentionable.longest_at(&body[start..]) {
            consumed = start + len;
            if let Some(who) = who
                && !found.contains(&who)
            {
                found.push(who);
            }
        }
    }
    found
}

/// The organization's members: their accounts.
async fn members<C: ConnectionTrait>(
    db: &C,
    scope: OrgScope,
) -> Result<Vec<accounts::Model>, ApiError> {
    Ok(scope
        .rows::<memberships::Entity>()
        .find_also_related(accounts::Entity)
        .all(db)
        .await?
        .into_iter()
        .filter_map(|(_, account)| account)
        .collect())
}

pub struct CommentsApi;

#[OpenApi(tag = "Tag::Comments")]
impl CommentsApi {
    /// Comment on a proposal.
    ///
    /// `body` is 1–10,000 characters after trimming; anything else is 400 `invalid-request`
    /// and nothing is written (a request body over 1 MiB is 413 `payload-too-large`).
    ///
    /// Mentions: an `@` at the start of the body or after a character that does not continue a
    /// word or address (letter, digit, `_ - + . @`) mentions the member of this organization
    /// whose email address or display name follows it, compared without regard to case; the
    /// longest address or name that ends there at a word boundary wins, so `@Ada Lovelace`
    /// mentions Ada Lovelace, not a member named Ada. A name shared by several members, an
    /// unknown name, and anybody outside the organization stay plain text. Mentions are
    /// resolved when the comment is written and stored with it, each member once. Every
    /// mentioned member except the author is emailed (unless they turned `mention_email` off)
    /// with a link to `{SERVICE_BASE_URL}/orgs/{org}/proposals/{proposal_id}`; the author
    /// mentioning themself is recorded but not emailed.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/comments",
        method = "post",
        operation_id = "createComment"
    )]
    async fn create(
        &self,
        org: org::Path<Discuss>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
        body: Json<NewComment>,
    ) -> Result<Created, CommentErrors> {
        let text = comment_body(&body.body)?;
        let now = state.clock.now();
        let author = &org.caller.account;
        let txn = state.db.begin_write().await?;
        let scope = org.scope();
        let proposal = scope.get(&txn, *proposal_id).await?;
        let mentioned: Vec<accounts::Model> = if may_mention(&text) {
            let members = members(&txn, scope).await?;
            let mentionable = Mentionable::new(
                members
                    .iter()
                    .enumerate()
                    .map(|(i, m)| (i, m.email.as_str(), m.name.as_deref())),
            );
            resolve_mentions(&text, &mentionable)
                .into_iter()
                .filter_map(|i| members.get(i).cloned())
                .collect()
        } else {
            Vec::new()
        };
        let mentions: Vec<CommentPerson> = mentioned.iter().map(person).collect();
        let row = comments::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            org_id: Set(org.org_id()),
            proposal_id: Set(proposal.id),
            author_id: Set(author.id),
            body: Set(text),
            mentions: Set(JsonText::new(
                &mentions
                    .iter()
                    .cloned()
                    .map(Mention::from)
                    .collect::<Vec<_>>(),
            )?),
            written_at: Set(now),
        }
        .insert(&txn)
        .await?;
        let id = CommentId::from(row.id);
        Entry::new("comment.created")
            .org(org.org_id())
            .by(&org.caller)
            .target(id)
            .details(serde_json::json!({
                "proposal_id": ProposalId::from(proposal.id),
                "mentions": mentions.iter().map(|m| m.id).collect::<Vec<_>>(),
            }))
            .write(&txn, now)
            .await?;
        txn.commit().await?;

        // The comment is written; the emails follow it. A failure to queue one is logged
        // rather than answered, since answering 500 for a stored comment invites a duplicate.
        // The `mention_email` setting (the digest setting) is on until a member turns it off.
        let author_name = author.name.clone().unwrap_or_else(|| author.email.clone());
        let muted: HashSet<uuid::Uuid> = if mentioned.is_empty() {
            HashSet::new()
        } else {
            scope
                .rows::<entities::digest_settings::Entity>()
                .filter(
                    entities::digest_settings::Column::AccountId
                        .is_in(mentioned.iter().map(|m| m.id)),
                )
                .filter(entities::digest_settings::Column::MentionEmail.eq(false))
                .all(&state.db.orm)
                .await
                .unwrap_or_else(|err| {
                    tracing::error!(error = %err, "could not read mention_email settings");
                    Vec::new()
                })
                .into_iter()
                .map(|s| s.account_id)
                .collect()
        };
        let mut emailed = HashSet::new();
        for member in mentioned.iter().filter(|m| m.id != author.id) {
            if muted.contains(&member.id) || !emailed.insert(member.id) {
                continue;
            }
            let email = domain::notifications::emails::mention(
                &state.config.base_url,
                &member.email,
                &author_name,
                domain::notifications::emails::MentionedOn {
                    org_name: &org.org.name,
                    org_slug: &org.org.slug,
                    proposal_id: proposal.id,
                    proposal_number: proposal.number,
                    proposal_title: &proposal.title,
                },
                &row.body,
            );
            if let Err(err) = state.queue.push(email).await {
                tracing::error!(
                    error = %err,
                    comment = %id,
                    "could not queue a mention email"
                );
            }
        }
        let author = person(author);
        Ok(Created::Created(Json(comment_view(row, author)?)))
    }

    /// A page of a proposal's comment thread.
    ///
    /// The 50 most recent comments, oldest first, and the exact `total` on the proposal. To
    /// read further back, pass the id of the page's first (oldest) comment as `before`; a page
    /// of fewer than 50 reaches the start of the thread. A `before` that is not the id of a
    /// comment on this proposal is 400 `invalid-request`.
    #[oai(
        path = "/v1/orgs/:org/proposals/:proposal_id/comments",
        method = "get",
        operation_id = "listComments"
    )]
    async fn list(
        &self,
        org: org::Path<Discuss>,
        state: poem::web::Data<&AppState>,
        /// The proposal's id (`prp_`).
        proposal_id: Path<ProposalId>,
        /// A comment's id (`cmt_`): answer the 50 comments written before it.
        #[oai(validator(pattern = "^cmt_[0-7][0-9a-hjkmnp-tv-z]{25}$"))]
        before: Query<Option<String>>,
    ) -> Result<Json<CommentList>, CommentErrors> {
        let db = &state.db.orm;
        let scope = org.scope();
        let proposal = scope.get(db, *proposal_id).await?;
        let mut query = scope
            .rows::<comments::Entity>()
            .filter(comments::Column::ProposalId.eq(proposal.id))
            .order_by_desc(comments::Column::Id)
            .limit(PAGE);
        if let Some(raw) = before.0.as_deref() {
            let not_here = || {
                ApiError::invalid(format!(
                    "before: {raw:?} is not the id of a comment on this proposal"
                ))
            };
            let before_id = CommentId::parse(raw).ok_or_else(not_here)?;
            let exists = scope
                .row(before_id)
                .filter(comments::Column::ProposalId.eq(proposal.id))
                .select_only()
                .column(comments::Column::Id)
                .into_tuple::<Uuid>()
                .one(db)
                .await?
                .is_some();
            if !exists {
                return Err(not_here().into());
            }
            query = query.filter(comments::Column::Id.lt(before_id));
        }
        let mut rows = query.all(db).await?;
        rows.reverse();
        let total = scope
            .rows::<comments::Entity>()
            .filter(comments::Column::ProposalId.eq(proposal.id))
            .count(db)
            .await?;
        let author_ids: Vec<Uuid> = rows
            .iter()
            .map(|r| r.author_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let authors: HashMap<Uuid, CommentPerson> = if author_ids.is_empty() {
            HashMap::new()
        } else {
            accounts::Entity::rows()
                .filter(accounts::Column::Id.is_in(author_ids))
                .all(db)
                .await?
                .iter()
                .map(|a| (a.id, person(a)))
                .collect()
        };
        let comments = rows
            .into_iter()
            .map(|row| {
                let author =
                    authors
                        .get(&row.author_id)
                        .cloned()
                        .unwrap_or_else(|| CommentPerson {
                            id: AccountId::from(row.author_id),
                            email: String::new(),
                            name: None,
                        });
                comment_view(row, author)
            })
            .collect::<Result<_, _>>()?;
        Ok(Json(CommentList {
            comments,
            total: i64::try_from(total).unwrap_or(i64::MAX),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn people() -> Mentionable {
        Mentionable::new([
            (0, "ada@acme.test", Some("Ada")),
            (1, "lovelace@acme.test", Some("Ada Lovelace")),
            (2, "bob@acme.test", None),
            (3, "kim@acme.test", Some("Kim")),
            (4, "kim2@acme.test", Some("kim")),
            (5, "zoë@acme.test", Some("Zoë Ångström")),
        ])
    }

    fn mentions(body: &str) -> Vec<usize> {
        resolve_mentions(body, &people())
    }

    #[test]
    fn addresses_and_names_match_without_regard_to_case() {
        assert_eq!(mentions("@BOB@acme.test please look"), vec![2]);
        assert_eq!(mentions("thanks @ada!"), vec![0]);
        assert_eq!(mentions("@zoë ångström, see"), vec![5]);
        assert_eq!(mentions("no mentions here"), Vec::<usize>::new());
    }

    #[test]
    fn the_longest_name_wins_and_names_end_at_a_word_boundary() {
        assert_eq!(mentions("@Ada Lovelace: ok"), vec![1]);
        assert_eq!(mentions("@Ada Lovelaces"), vec![0]);
        assert_eq!(mentions("@Adam"), Vec::<usize>::new());
        assert_eq!(mentions("@ada."), vec![0]);
        assert_eq!(mentions("@ada.lovelace"), Vec::<usize>::new());
        assert_eq!(mentions("@bob@acme.test.uk"), Vec::<usize>::new());
    }

    #[test]
    fn addresses_in_running_text_shared_names_and_strangers_are_text() {
        assert_eq!(mentions("mail bob@acme.test"), Vec::<usize>::new());
        assert_eq!(mentions("@kim"), Vec::<usize>::new(), "two members are Kim");
        assert_eq!(mentions("@kim2@acme.test"), vec![4]);
        assert_eq!(mentions("@eve@evil.test @nobody"), Vec::<usize>::new());
    }

    #[test]
    fn each_member_once_in_order_of_first_mention() {
        assert_eq!(
            mentions("@bob@acme.test then @Ada and @bob, (@ada)"),
            vec![2, 0]
        );
    }

    #[test]
    fn bodies_are_trimmed_and_limited() {
        assert_eq!(
            comment_body("  hi\n there \n").ok().as_deref(),
            Some("hi\n there")
        );
        assert!(comment_body(" \n\t ").is_err());
        assert!(comment_body(&"x".repeat(MAX_BODY)).is_ok());
        assert!(comment_body(&"x".repeat(MAX_BODY + 1)).is_err());
        assert!(comment_body("nul\u{0}").is_err());
    }
}
