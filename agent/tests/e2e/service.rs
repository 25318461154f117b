//! The service the real agent talks to: a test app (its own database, SQLite or Postgres as
//! `TEST_DATABASE_URL` says) that names itself by the address it listens on, with an owner, an
//! enrollment token and a policy; and the real `fleet-agent` binary, run against it on a root.

use std::path::{Path, PathBuf};

use reqwest::Method;
use serde_json::{Value, json};
use tests::{As, Session, TestApp};

pub struct Service {
    pub app: TestApp,
    pub owner: Session,
    pub token: String,
}

impl Service {
    pub async fn start() -> Service {
        let app = TestApp::builder().for_real_agents().start().await;
        let owner = app.sign_up("owner@acme.test", "acme").await;
        let created = app
            .call(
                As::Session(&owner),
                Method::POST,
                "/v1/orgs/acme/enrollment-tokens",
                Some(json!({"name": "hosts", "labels": {"env": "test"}})),
            )
            .await;
        assert_eq!(created.status.as_u16(), 201, "{}", created.body);
        let token = created.json()["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Service { app, owner, token }
    }

    pub async fn get(&self, path: &str) -> Value {
        let answer = self
            .app
            .call(As::Session(&self.owner), Method::GET, path, None)
            .await;
        assert_eq!(answer.status.as_u16(), 200, "GET {path}: {}", answer.body);
        answer.json()
    }

    /// A policy over every host and update, one approval, applied at once, never rebooting;
    /// the proposal it opens.
    pub async fn proposal(&self) -> Value {
        let created = self
            .app
            .call(
                As::Session(&self.owner),
                Method::POST,
                "/v1/orgs/acme/policies",
                Some(json!({"name": "everything", "scope": {"groups": []}, "required_approvals": 1,
                            "apply": "asap", "reboot": "never", "auto_merge": false, "updates": "all"})),
            )
            .await;
        assert_eq!(created.status.as_u16(), 201, "{}", created.body);
        self.app.run_pending_jobs().await;
        let list = self.get("/v1/orgs/acme/proposals").await;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 1, "one proposal opened: {list:#}");
        let id = items[0]["id"].as_str().unwrap_or_default().to_owned();
        self.get(&format!("/v1/orgs/acme/proposals/{id}")).await
    }

    pub async fn approve(&self, id: &str) {
        let answer = self
            .app
            .call(
                As::Session(&self.owner),
                Method::POST,
                &format!("/v1/orgs/acme/proposals/{id}/approve"),
                None,
            )
            .await;
        assert_eq!(answer.status.as_u16(), 200, "{}", answer.body);
        assert_eq!(answer.json()["status"], "approved", "{}", answer.body);
    }

    pub async fn proposal_status(&self, id: &str) -> String {
        self.get(&format!("/v1/orgs/acme/proposals/{id}")).await["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The host's jobs, as its event list records them (`job_ran`), and the stored job rows.
    #[allow(clippy::disallowed_methods)] // Test code: reads the rows directly.
    pub async fn jobs(&self, host_id: &str) -> Vec<entities::host_jobs::Model> {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        let uuid = platform::ids::HostId::parse(host_id)
            .map(platform::ids::HostId::uuid)
            .expect("a host id");
        entities::host_jobs::Entity::find()
            .filter(entities::host_jobs::Column::HostId.eq(uuid))
            .all(&self.app.state.db.orm)
            .await
            .expect("host jobs")
    }
}

/// The agent binary: this build's, or `FLEET_AGENT_BIN` (the benchmark measures a release
/// build).
fn binary() -> String {
    std::env::var("FLEET_AGENT_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_fleet-agent").to_owned())
}

/// The real `fleet-agent`, on a root, with its own configuration and state directory.
pub struct Agent {
    config: PathBuf,
    state: tempfile::TempDir,
    root: PathBuf,
}

/// What one run of the agent printed.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Agent {
    pub fn new(root: &Path, config: &str) -> Agent {
        let state = tempfile::tempdir().expect("a state directory");
        let file = state.path().join("agent.toml");
        std::fs::write(&file, config).expect("agent.toml");
        Agent {
            config: file,
            state,
            root: root.to_owned(),
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state.path().join("state")
    }

    /// Starts the agent without waiting for it.
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        tokio::process::Command::new(binary())
            .arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .env("FLEET_AGENT_LOG", "info")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start fleet-agent")
    }

    /// [`Agent::spawn`] with its output discarded.
    pub fn spawn_quiet(&self, args: &[&str]) -> tokio::process::Child {
        tokio::process::Command::new(binary())
            .arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start fleet-agent")
    }

    pub async fn run(&self, args: &[&str]) -> Ran {
        let out = tokio::process::Command::new(binary())
            .arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .env(
                "FLEET_AGENT_LOG",
                std::env::var("FLEET_AGENT_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .kill_on_drop(true)
            .output()
            .await
            .expect("run fleet-agent");
        let ran = Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        eprintln!("fleet-agent {args:?} → {:?}\n{}", ran.code, ran.stderr);
        ran
    }

    pub async fn enroll(&self, service: &Service) -> String {
        let ran = self
            .run(&[
                "enroll",
                "--server",
                &service.app.base,
                "--token",
                &service.token,
                "--label",
                "role=web",
            ])
            .await;
        assert_eq!(ran.code, Some(0), "enrol: {}", ran.stderr);
        ran.stdout.trim().to_owned()
    }
}
