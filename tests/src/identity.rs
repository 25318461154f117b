//! Helpers that make identity tests short: sign up an organization through the real emailed
//! flow, add members in any role, and call as one of them.

use std::time::Duration;

use domain::roles::Role;
use entities::{accounts, memberships, organizations};
use reqwest::Method;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};

use crate::{TestApp, TestResponse};

/// A signed-in browser: its cookie and CSRF token.
#[derive(Clone, Debug)]
pub struct Session {
    pub email: String,
    /// `service_session=<value>`
    pub cookie: String,
    pub csrf: String,
}

/// Who makes a request.
#[derive(Clone, Copy, Debug)]
pub enum As<'a> {
    Nobody,
    Session(&'a Session),
    /// A session that leaves out the CSRF header.
    SessionWithoutCsrf(&'a Session),
    Bearer(&'a str),
}

/// The cookie pair from a `Set-Cookie` answer.
pub fn session_cookie(response: &TestResponse) -> String {
    let header = response
        .header("set-cookie")
        .unwrap_or_else(|| panic!("no Set-Cookie in {}: {}", response.status, response.body));
    header
        .split(';')
        .next()
        .map(str::to_owned)
        .unwrap_or_default()
}

/// The token of the newest link in an email body.
pub fn token_in(text: &str) -> String {
    let start = text.rfind("token=").expect("a link with a token") + "token=".len();
    text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

impl TestApp {
    pub async fn call(
        &self,
        who: As<'_>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> TestResponse {
        self.call_at(&self.base, who, method, path, body).await
    }

    /// [`TestApp::call`] to another server on the same database (an api replica).
    pub async fn call_at(
        &self,
        base: &str,
        who: As<'_>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> TestResponse {
        let mut headers: Vec<(&str, String)> = Vec::new();
        match who {
            As::Nobody => {}
            As::Session(session) => {
                headers.push(("cookie", session.cookie.clone()));
                headers.push(("x-service-csrf", session.csrf.clone()));
            }
            As::SessionWithoutCsrf(session) => headers.push(("cookie", session.cookie.clone())),
            As::Bearer(token) => headers.push(("authorization", format!("Bearer {token}"))),
        }
        let borrowed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.request_at(base, method, path, body, &borrowed).await
    }

    /// Waits for the newest email to `address` and returns the token of its link.
    pub async fn emailed_token(&self, address: &str) -> String {
        let message = self
            .smtp
            .wait_for_message_to(address, Duration::from_secs(30))
            .await;
        token_in(&message.text())
    }

    /// Signs up `email` with a new organization `slug` through the emailed flow; the owner's
    /// session.
    pub async fn sign_up(&self, email: &str, slug: &str) -> Session {
        let before = self.smtp.messages().await.len();
        let response = self
            .post_json(
                "/v1/auth/sign-up",
                json!({"email": email, "name": "Owner", "organization": {"name": slug, "slug": slug}}),
            )
            .await;
        assert_eq!(response.status.as_u16(), 202, "{}", response.body);
        self.smtp
            .wait_for(before + 1, Duration::from_secs(30))
            .await;
        let token = self.emailed_token(email).await;
        let verified = self
            .post_json("/v1/auth/sign-up/verify", json!({"token": token}))
            .await;
        assert_eq!(verified.status.as_u16(), 200, "{}", verified.body);
        Session {
            email: email.to_owned(),
            cookie: session_cookie(&verified),
            csrf: verified.json()["csrf_token"]
                .as_str()
                .expect("csrf_token")
                .to_owned(),
        }
    }

    /// Creates organization `slug` directly, without anybody in it (for tests that run no
    /// worker and so cannot sign up through email).
    pub async fn organization(&self, slug: &str) {
        organizations::ActiveModel {
            id: Set(platform::ids::new_uuid()),
            slug: Set(slug.to_owned()),
            name: Set(slug.to_owned()),
            plan: Set("free".into()),
            sso_enforced: Set(false),
            created_at: Set(self.state.clock.now()),
            proposal_seq: Set(0),
            max_concurrent_reboots: Set(None),
        }
        .insert(&self.state.db.orm)
        .await
        .expect("organization");
    }

    /// Adds a member with `role` to organization `slug` directly, and signs them in.
    pub async fn member(&self, slug: &str, role: Role, email: &str) -> Session {
        let db = &self.state.db.orm;
        let now = self.state.clock.now();
        let org = organizations::Entity::find()
            .filter(organizations::Column::Slug.eq(slug))
            .one(db)
            .await
            .expect("query")
            .expect("organization exists");
        let account = match accounts::Entity::find()
            .filter(accounts::Column::Email.eq(email))
            .one(db)
            .await
            .expect("query")
        {
            Some(account) => account,
            None => accounts::ActiveModel {
                id: Set(platform::ids::new_uuid()),
                email: Set(email.to_owned()),
                name: Set(Some(format!("{role} member"))),
                time_zone: Set("UTC".into()),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(db)
            .await
            .expect("account"),
        };
        memberships::ActiveModel {
            org_id: Set(org.id),
            account_id: Set(account.id),
            role: Set(role.as_str().to_owned()),
            created_at: Set(now),
        }
        .insert(db)
        .await
        .expect("membership");
        let session = api::identity::auth::start_session(&self.state, db, account.id, now)
            .await
            .expect("session");
        Session {
            email: email.to_owned(),
            cookie: session
                .cookie
                .split(';')
                .next()
                .unwrap_or_default()
                .to_owned(),
            csrf: session.csrf_token,
        }
    }

    /// Records `domain` as verified by organization `slug`, as a verified TXT record would
    /// (the DNS round trip itself is tested in `sso.rs`).
    pub async fn verified_domain(&self, slug: &str, domain: &str) {
        let db = &self.state.db.orm;
        let now = self.state.clock.now();
        let org = organizations::Entity::find()
            .filter(organizations::Column::Slug.eq(slug))
            .one(db)
            .await
            .expect("query")
            .expect("organization exists");
        entities::sso_domains::ActiveModel {
            org_id: Set(org.id),
            domain: Set(domain.to_owned()),
            txt_value: Set("service-domain-verification=test".into()),
            verified_at: Set(Some(now)),
            verified_domain: Set(Some(domain.to_owned())),
            created_at: Set(now),
        }
        .insert(db)
        .await
        .expect("verified domain");
    }

    /// The member id (`usr_`) of `email` in organization `acme`, as `admin` reads the list.
    pub async fn member_id(&self, admin: &Session, email: &str) -> String {
        let list = self
            .call(
                As::Session(admin),
                Method::GET,
                "/v1/orgs/acme/members",
                None,
            )
            .await;
        assert_eq!(list.status.as_u16(), 200, "{}", list.body);
        list.json()["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["email"] == email)
            .and_then(|m| m["id"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{email} is a member"))
    }

    /// Creates an API token with `role` through the API, as `admin`; its `sat_` value.
    pub async fn api_token(&self, admin: &Session, slug: &str, role: Role) -> String {
        let response = self
            .call(
                As::Session(admin),
                Method::POST,
                &format!("/v1/orgs/{slug}/api-tokens"),
                Some(json!({"name": "automation", "role": role.as_str()})),
            )
            .await;
        assert_eq!(response.status.as_u16(), 201, "{}", response.body);
        response.json()["token"].as_str().expect("token").to_owned()
    }
}

impl TestApp {
    /// Inserts a host into organization `slug` directly (as enrolment would) and returns its
    /// `hst_` id.
    pub async fn host(&self, slug: &str, hostname: &str, labels: &[(&str, &str)]) -> String {
        use entities::{host_labels, hosts, json::JsonText};
        let db = &self.state.db.orm;
        let now = self.state.clock.now();
        let org = organizations::Entity::find()
            .filter(organizations::Column::Slug.eq(slug))
            .one(db)
            .await
            .expect("query")
            .expect("organization exists");
        let labels: std::collections::BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let id = platform::ids::new_uuid();
        hosts::ActiveModel {
            id: Set(id),
            org_id: Set(org.id),
            machine_id: Set(format!("machine-{hostname}")),
            hostname: Set(hostname.to_owned()),
            display_name: Set(None),
            notes: Set(None),
            labels: Set(JsonText::new(&labels).expect("labels")),
            distro: Set(Some("ubuntu".into())),
            distro_version: Set(Some("24.04".into())),
            distro_codename: Set(Some("noble".into())),
            os_family: Set(Some("debian".into())),
            arch: Set(Some("x86_64".into())),
            kernel_version: Set(None),
            virtualization: Set(None),
            agent_version: Set(None),
            agent_mode: Set(None),
            agent_permissions: Set(None),
            agent_install: Set(None),
            cloud: Set(None),
            frozen: Set(None),
            snapshots: Set(None),
            reboot_required: Set(None),
            services_need_restart: Set(JsonText::from_stored("[]")),
            held_packages: Set(JsonText::from_stored("[]")),
            updates_total: Set(None),
            updates_security: Set(None),
            updates_requiring_reboot: Set(None),
            advisory_coverage: Set("unknown_release".into()),
            status: Set("pending".into()),
            enrollment_token_id: Set(None),
            inventory_digest: Set(None),
            check_in_interval_s: Set(300),
            enrolled_at: Set(now),
            last_seen_at: Set(None),
            last_inventory_at: Set(None),
            cert_expires_at: Set(None),
            decommissioned_at: Set(None),
            updated_at: Set(now),
            release_upgrade: Set(None),
            updates_seq: Set(0),
            reboot_slot_until: Set(None),
            reboot_slot_job: Set(None),
        }
        .insert(db)
        .await
        .expect("host");
        for (key, value) in &labels {
            host_labels::ActiveModel {
                org_id: Set(org.id),
                host_id: Set(id),
                key: Set(key.clone()),
                value: Set(value.clone()),
            }
            .insert(db)
            .await
            .expect("label");
        }
        platform::ids::HostId::from(id).to_string()
    }
}
