//! Throwaway roots with the real package managers (never this machine's own package database):
//! a Debian 12 tree made once by mmdebstrap (variant `apt`, documentation left out) and cached
//! as a tarball under `~/.cache/fleet-update-service/roots/`, unpacked afresh for every test
//! (about 2 s); the rpm root is the same Debian tree with `rpm`, `dnf` and `dnf-plugins-core`
//! added. `/proc` and a private `/dev/pts` are mounted inside for apt and dnf, and unmounted when
//! the root is dropped, before its directory is removed.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

/// The Debian mirror the roots are made from (`FLEET_TEST_DEBIAN_MIRROR` overrides).
fn mirror() -> String {
    std::env::var("FLEET_TEST_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".to_owned())
}

fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/fleet-update-service/roots")
}

/// The cached tarball `name`, made with mmdebstrap (with `include`d packages) when missing;
/// tests that need it at once wait for the one making it.
fn cached(name: &str, include: &[&str]) -> PathBuf {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).expect("the roots cache directory");
    let tar = dir.join(format!("{name}.tar"));
    let lock = File::create(dir.join(format!("{name}.lock"))).expect("the cache lock");
    lock.lock().expect("lock the cache");
    if !tar.exists() {
        assert!(
            Command::new("mmdebstrap").arg("--version").output().is_ok(),
            "mmdebstrap is not installed: `apt-get install mmdebstrap` (.ci/run does)"
        );
        let partial = dir.join(format!("{name}.partial.tar"));
        let mut command = Command::new("mmdebstrap");
        command.args([
            "--variant=apt",
            "--mode=root",
            "--quiet",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
        ]);
        if !include.is_empty() {
            command.arg(format!("--include={}", include.join(",")));
        }
        command.arg("bookworm").arg(&partial).arg(mirror());
        let out = command.output().expect("run mmdebstrap");
        assert!(
            out.status.success(),
            "mmdebstrap failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&partial, &tar).expect("keep the root");
    }
    tar
}

/// A root directory, unpacked and mounted; gone when dropped.
pub struct Root {
    dir: Option<tempfile::TempDir>,
    mounts: Vec<PathBuf>,
}

/// What a command in the root printed.
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Root {
    /// Debian 12 with apt.
    pub fn debian() -> Root {
        Root::unpack(&cached("debian-bookworm-apt-1", &[]))
    }

    /// Debian 12 with rpm and dnf (for an rpm database of the test's own packages).
    pub fn rpm() -> Root {
        Root::unpack(&cached(
            "debian-bookworm-rpm-1",
            &["rpm", "dnf", "dnf-plugins-core"],
        ))
    }

    fn unpack(tar: &Path) -> Root {
        let dir = tempfile::Builder::new()
            .prefix("fleet-root-")
            .tempdir_in(cache_dir())
            .expect("a root directory");
        let out = Command::new("tar")
            .arg("-xf")
            .arg(tar)
            .arg("-C")
            .arg(dir.path())
            .output()
            .expect("run tar");
        assert!(
            out.status.success(),
            "unpacking the root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut root = Root {
            dir: Some(dir),
            mounts: Vec::new(),
        };
        root.mount(&["-t", "proc", "proc"], "proc");
        std::fs::create_dir_all(root.path().join("dev/pts")).expect("dev/pts");
        root.mount(
            &["-t", "devpts", "devpts", "-o", "newinstance,ptmxmode=0666"],
            "dev/pts",
        );
        let machine_id = format!("{:032x}", rand_u128());
        root.write("/etc/machine-id", &format!("{machine_id}\n"));
        root
    }

    fn mount(&mut self, args: &[&str], at: &str) {
        let target = self.path().join(at);
        let out = Command::new("mount")
            .args(args)
            .arg(&target)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount {at}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounts.push(target);
    }

    pub fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .map(|d| d.path())
            .unwrap_or(Path::new("/nonexistent"))
    }

    /// Where the root's absolute `path` is.
    pub fn file(&self, path: &str) -> PathBuf {
        self.path().join(path.trim_start_matches('/'))
    }

    pub fn write(&self, path: &str, text: &str) {
        let file = self.file(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).expect("parent directory");
        }
        std::fs::write(&file, text).expect("write into the root");
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.file(path)).unwrap_or_default()
    }

    /// Runs `program` inside the root (chroot), in the C locale, non-interactively.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        let out = Command::new("chroot")
            .arg(self.path())
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LC_ALL", "C")
            .env("HOME", "/root")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .expect("run chroot");
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// [`Root::run`], which must succeed; its standard output.
    pub fn must(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert_eq!(
            out.code,
            Some(0),
            "{program} {args:?} in the root failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let mut unmounted = true;
        for target in self.mounts.iter().rev() {
            let ok = Command::new("umount")
                .arg("-l")
                .arg(target)
                .status()
                .is_ok_and(|s| s.success());
            unmounted &= ok;
        }
        if !unmounted {
            // Never remove a tree with something still mounted in it.
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "leaving {} behind: a mount in it would not go",
                    dir.path().display()
                );
                let _ = dir.keep();
            }
        }
    }
}

fn rand_u128() -> u128 {
    let mut bytes = [0u8; 16];
    if let Ok(mut file) = File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut file, &mut bytes);
    }
    u128::from_le_bytes(bytes)
}
