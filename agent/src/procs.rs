//! Running processes and the systemd units they belong to, from `/proc`: which units map files
//! a package ships (they restart when it is upgraded, decisions §19 impact) and which map
//! files that were deleted (`services_need_restart`: an upgrade replaced a library they still
//! run).
//!
//! Only processes whose root directory is the system's root count, so an agent looking after a
//! throwaway root sees the processes started inside it, and one looking after `/` the host's.
//! A process's unit is the `.service` its control group names under `system.slice`.

use std::collections::{BTreeSet, HashMap};

use crate::system::System;

/// Directories whose deleted files mean a process runs replaced code.
const CODE_DIRS: [&str; 6] = ["/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/opt/"];

/// The units of the system's processes and the files they map.
#[derive(Debug, Default, Clone)]
pub struct Running {
    /// System path → units of the processes mapping it.
    by_file: HashMap<String, BTreeSet<String>>,
    /// Units running replaced code.
    stale: BTreeSet<String>,
}

impl Running {
    /// Reads `/proc` (the machine's: processes of a root directory show there too).
    pub fn scan(system: &System) -> Running {
        let mut running = Running::default();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return running;
        };
        let root =
            std::fs::canonicalize(system.root()).unwrap_or_else(|_| system.root().to_owned());
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            {
                continue;
            }
            let proc_dir = entry.path();
            // Another root (a container, a chroot), or gone meanwhile: not this system's.
            if std::fs::read_link(proc_dir.join("root")).ok().as_deref() != Some(root.as_path()) {
                continue;
            }
            let Some(unit) = std::fs::read_to_string(proc_dir.join("cgroup"))
                .ok()
                .and_then(|c| unit_of(&c))
            else {
                continue;
            };
            let Ok(maps) = std::fs::read_to_string(proc_dir.join("maps")) else {
                continue;
            };
            for (path, deleted) in mapped_files(&maps) {
                let Some(path) = system.system_path(path) else {
                    continue;
                };
                if deleted {
                    if CODE_DIRS.iter().any(|d| path.starts_with(d)) {
                        running.stale.insert(unit.clone());
                    }
                } else {
                    running
                        .by_file
                        .entry(path.to_owned())
                        .or_default()
                        .insert(unit.clone());
                }
            }
        }
        running
    }

    /// Units whose processes map one of `files` (system paths).
    pub fn units_using<'a>(&self, files: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
        let mut units = BTreeSet::new();
        for file in files {
            if let Some(found) = self.by_file.get(file) {
                units.extend(found.iter().cloned());
            }
        }
        units
    }

    /// Units running code that was replaced since they started.
    pub fn stale_units(&self) -> Vec<String> {
        self.stale.iter().cloned().collect()
    }
}

/// The systemd service a process's `/proc/PID/cgroup` names: the last `*.service` of its
/// unified (`0::`) or `name=systemd` hierarchy path, for system services only.
pub fn unit_of(cgroup: &str) -> Option<String> {
    cgroup
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            (controllers.is_empty() || controllers == "name=systemd").then_some(path)
        })
        .filter(|path| path.starts_with("/system.slice/"))
        .find_map(|path| {
            path.rsplit('/')
                .find(|segment| segment.ends_with(".service") && segment.len() > ".service".len())
                .map(str::to_owned)
        })
}

/// The files a `/proc/PID/maps` maps, each once, and whether it was deleted.
pub fn mapped_files(maps: &str) -> Vec<(&str, bool)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode pathname: the path is what follows the fifth field.
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            rest = rest.find(' ').map_or("", |at| &rest[at..]);
        }
        let path = rest.trim();
        if !path.starts_with('/') {
            continue;
        }
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(path) => (path, true),
            None => (path, false),
        };
        if seen.insert((path, deleted)) {
            out.push((path, deleted));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_come_from_the_system_slice() {
        assert_eq!(
            unit_of("0::/system.slice/nginx.service\n").as_deref(),
            Some("nginx.service")
        );
        assert_eq!(
            unit_of("12:pids:/\n1:name=systemd:/system.slice/ssh.service\n0::/\n").as_deref(),
            Some("ssh.service")
        );
        assert_eq!(
            unit_of("0::/system.slice/docker-abc.scope\n"),
            None,
            "a scope is not a service to restart"
        );
        assert_eq!(
            unit_of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service\n"),
            None
        );
        assert_eq!(unit_of("0::/\n"), None);
        assert_eq!(unit_of("garbage"), None);
    }

    #[test]
    fn maps_name_each_file_once_and_say_deleted() {
        let maps = "\
55d0c0a00000-55d0c0a28000 r--p 00000000 08:01 1835  /usr/sbin/nginx
55d0c0a28000-55d0c0b0c000 r-xp 00028000 08:01 1835  /usr/sbin/nginx
7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0 
7f1c2d000000-7f1c2d200000 r-xp 00000000 08:01 2211  /usr/lib/x86_64-linux-gnu/libssl.so.3 (deleted)
7f1c2e000000-7f1c2e100000 r--p 00000000 08:01 2212  /usr/lib/locale/C.utf8/LC_CTYPE
7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0    [stack]
";
        assert_eq!(
            mapped_files(maps),
            [
                ("/usr/sbin/nginx", false),
                ("/usr/lib/x86_64-linux-gnu/libssl.so.3", true),
                ("/usr/lib/locale/C.utf8/LC_CTYPE", false),
            ]
        );
    }
}
