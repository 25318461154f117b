//! A Postgres server of a test's own: `initdb` into a temp dir, its own port on loopback, started
//! and stopped with `pg_ctl`. For tests that stop and restart the database server under the
//! service: the machine's shared server (other tests use it) is never touched.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Command,
};

use sqlx::Connection;

pub struct PrivateCluster {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
    /// Whether the server programs run as the `postgres` user (they refuse to run as root).
    as_postgres: bool,
}

impl PrivateCluster {
    /// The newest installed Postgres' programs (`/usr/lib/postgresql/<version>/bin`).
    pub fn programs() -> Option<PathBuf> {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin)
    }

    /// Makes a cluster in a new temp dir and starts it, with a database `fleet`.
    pub async fn start() -> PrivateCluster {
        let bin = Self::programs().expect("Postgres' programs in /usr/lib/postgresql/*/bin");
        let dir = tempfile::Builder::new()
            .prefix("fleet-pg-")
            .tempdir()
            .expect("temp dir");
        let as_postgres = std::fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false);
        if as_postgres {
            let ids = |flag: &str| -> u32 {
                let out = Command::new("id")
                    .args([flag, "postgres"])
                    .output()
                    .expect("run id");
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .expect("the postgres user exists")
            };
            std::os::unix::fs::chown(dir.path(), Some(ids("-u")), Some(ids("-g")))
                .expect("chown the cluster's directory");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let cluster = PrivateCluster {
            dir,
            port,
            bin,
            as_postgres,
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D",
                &data,
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        // Room for a few processes' pools and the job queues' LISTEN connections.
        std::fs::write(
            Path::new(&data).join("postgresql.auto.conf"),
            "max_connections = 200\n",
        )
        .expect("configure the cluster");
        cluster.start_server();
        let mut admin = sqlx::PgConnection::connect(&cluster.url("postgres"))
            .await
            .expect("connect to the private cluster");
        sqlx::query("CREATE DATABASE fleet")
            .execute(&mut admin)
            .await
            .expect("create the database fleet");
        let _ = admin.close().await;
        cluster
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The cluster's log file (the server's output).
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Runs one of Postgres' programs (as `postgres` when this process is root) to its end.
    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let status = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .stdout(std::process::Stdio::null())
                .status()
        } else {
            Command::new(&path)
                .args(args)
                .stdout(std::process::Stdio::null())
                .status()
        }
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
        assert!(status.success(), "{program} {args:?}: {status}");
    }

    fn start_server(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.log().display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        );
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`: no checkpoint,
    /// the clients' connections cut); what was committed is recovered from the WAL at the next
    /// start.
    pub fn kill(&self) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }

    /// Starts the server again and returns when it accepts connections.
    pub fn restart(&self) {
        self.start_server();
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let path = self.bin.join("pg_ctl");
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        let _ = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
        } else {
            Command::new(&path)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
        };
    }
}
