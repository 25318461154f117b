//! A "service" running in a root: a process started inside it (chroot) and placed in a control
//! group named like a systemd unit under `system.slice`, as systemd would run it, so that the
//! agent's view of units (from `/proc/PID/cgroup` and `/proc/PID/maps`) is exercised for real.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// The cgroup hierarchy systemd's units live in here: the named v1 hierarchy of a hybrid
/// set-up, else the unified one.
fn hierarchy() -> PathBuf {
    let v1 = Path::new("/sys/fs/cgroup/systemd");
    if v1.join("cgroup.procs").exists() {
        return v1.to_owned();
    }
    let v2 = Path::new("/sys/fs/cgroup");
    assert!(
        v2.join("cgroup.procs").exists(),
        "no cgroup hierarchy to run a test service in"
    );
    v2.to_owned()
}

/// A process of `unit` running `program` inside `root`; stopped when dropped.
pub struct Daemon {
    child: Child,
    slice: PathBuf,
    group: PathBuf,
}

impl Daemon {
    pub fn start(root: &Path, program: &str, unit: &str) -> Daemon {
        let slice = hierarchy().join("system.slice").join(format!(
            "fleet-e2e-{}.slice",
            std::process::id() as u64 * 1_000 + u64::from(rand_u16())
        ));
        let group = slice.join(unit);
        std::fs::create_dir_all(&group).expect("a cgroup for the test service");
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec chroot {} {program} 3600",
                group.display(),
                root.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the test service");
        // Until it runs the program (its maps name it), the agent would not see it.
        let maps = PathBuf::from(format!("/proc/{}/maps", child.id()));
        for _ in 0..200 {
            if std::fs::read_to_string(&maps).is_ok_and(|m| m.contains(program)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        Daemon {
            child,
            slice,
            group,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir(&self.group);
        let _ = std::fs::remove_dir(&self.slice);
    }
}

fn rand_u16() -> u16 {
    let mut bytes = [0u8; 2];
    if let Ok(mut file) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut file, &mut bytes);
    }
    u16::from_le_bytes(bytes)
}
