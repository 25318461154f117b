//! A fresh database per test: a SQLite file in a temp dir, or, when `TEST_DATABASE_URL` names a
//! Postgres server, a new database on it that is dropped when the test ends.

use sqlx::{Connection, PgConnection};

pub enum TestDatabase {
    Sqlite {
        url: String,
        _dir: tempfile::TempDir,
    },
    Postgres {
        url: String,
        admin_url: String,
        name: String,
    },
}

impl TestDatabase {
    /// Whether tests run against Postgres.
    pub fn postgres_url() -> Option<String> {
        std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|u| u.starts_with("postgres"))
    }

    pub async fn create() -> TestDatabase {
        Self::create_on(Self::postgres_url()).await
    }

    /// A new database on the Postgres server of `admin_url` (a database it can connect to as a
    /// user who may create databases), or SQLite when there is none.
    pub async fn create_on(server: Option<String>) -> TestDatabase {
        match server {
            Some(admin_url) => {
                let name = format!("t_{}", uuid::Uuid::now_v7().simple());
                let mut admin = PgConnection::connect(&admin_url)
                    .await
                    .expect("connect to TEST_DATABASE_URL");
                // `name` is generated here from hex digits only.
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut admin)
                    .await
                    .expect("create the test database");
                let _ = admin.close().await;
                let mut url = url::Url::parse(&admin_url).expect("TEST_DATABASE_URL is a URL");
                url.set_path(&format!("/{name}"));
                TestDatabase::Postgres {
                    url: url.to_string(),
                    admin_url,
                    name,
                }
            }
            None => Self::sqlite(),
        }
    }

    /// A SQLite database (the embedded default) whatever `TEST_DATABASE_URL` says, for tests of
    /// what only the embedded default does (its file, its disk).
    pub fn sqlite() -> TestDatabase {
        Self::sqlite_in(&std::env::temp_dir())
    }

    /// [`TestDatabase::sqlite`] in a new directory under `parent` (a small disk of the test's
    /// own, say).
    pub fn sqlite_in(parent: &std::path::Path) -> TestDatabase {
        let dir = tempfile::tempdir_in(parent).expect("temp dir");
        let url = format!("sqlite://{}/service.db?mode=rwc", dir.path().display());
        TestDatabase::Sqlite { url, _dir: dir }
    }

    pub fn url(&self) -> &str {
        match self {
            TestDatabase::Sqlite { url, .. } | TestDatabase::Postgres { url, .. } => url,
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, TestDatabase::Postgres { .. })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let TestDatabase::Postgres {
            admin_url, name, ..
        } = self
        {
            let admin_url = admin_url.clone();
            let name = name.clone();
            let shown = name.clone();
            // Drop runs inside the test's runtime: use a thread with a runtime of its own.
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async {
                    let mut admin = PgConnection::connect(&admin_url).await?;
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await?;
                    admin.close().await?;
                    Ok::<(), sqlx::Error>(())
                })?;
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            })
            .join();
            if !matches!(dropped, Ok(Ok(()))) {
                eprintln!("could not drop test database {shown}");
            }
        }
    }
}
