//! The dpkg database: `/var/lib/dpkg/status` (deb822 paragraphs) and the file lists of
//! `/var/lib/dpkg/info`.
//!
//! The status file is read line by line, never held whole (it is megabytes on a big host):
//! only `Package`, `Status`, `Version`, `Architecture` and `Source` matter, and those are
//! single-line fields; continuation lines (descriptions, conffiles) are skipped.

use std::io::BufRead;

/// An installed package as dpkg records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub version: String,
    pub arch: String,
    /// The source package (`Source:`, else the package itself).
    pub source_name: String,
    /// The source version (`Source: name (version)`, else the package's version).
    pub source_version: String,
    /// Selected `hold` (`apt-mark hold`, `dpkg --set-selections`).
    pub held: bool,
}

#[derive(Default)]
struct Paragraph {
    package: Option<String>,
    status: Option<String>,
    version: Option<String>,
    arch: Option<String>,
    source: Option<String>,
}

impl Paragraph {
    /// The package, when it is installed: status `install ok installed` (or `hold ok
    /// installed`, which is installed and held).
    fn installed(self) -> Option<Installed> {
        let status = self.status?;
        let mut words = status.split_whitespace();
        let want = words.next()?;
        let flag = words.next()?;
        let state = words.next()?;
        if flag != "ok" || state != "installed" || !matches!(want, "install" | "hold") {
            return None;
        }
        let name = self.package?;
        let version = self.version?;
        let (source_name, source_version) = match self.source.as_deref().map(str::trim) {
            Some(source) if !source.is_empty() => match source.split_once('(') {
                Some((source_name, rest)) => (
                    source_name.trim().to_owned(),
                    rest.trim_end_matches(')').trim().to_owned(),
                ),
                None => (source.to_owned(), version.clone()),
            },
            _ => (name.clone(), version.clone()),
        };
        Some(Installed {
            name,
            version,
            arch: self.arch.unwrap_or_else(|| "all".to_owned()),
            source_name,
            source_version,
            held: want == "hold",
        })
    }
}

/// The installed packages of a status file, in its order.
pub fn read_status(reader: impl BufRead) -> std::io::Result<Vec<Installed>> {
    let mut out = Vec::new();
    let mut paragraph = Paragraph::default();
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            out.extend(std::mem::take(&mut paragraph).installed());
            continue;
        }
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_owned();
        match field {
            "Package" => paragraph.package = Some(value),
            "Status" => paragraph.status = Some(value),
            "Version" => paragraph.version = Some(value),
            "Architecture" => paragraph.arch = Some(value),
            "Source" => paragraph.source = Some(value),
            _ => {}
        }
    }
    out.extend(paragraph.installed());
    Ok(out)
}

/// Where the `/var/lib/dpkg/info` file list of a package may be: `name.list`, or
/// `name:arch.list` for a multi-arch package (of `arch`, or of the machine's own architecture
/// when `arch` is not known).
pub fn list_files(name: &str, arch: &str) -> [String; 3] {
    let native = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "i386",
        "arm" => "armhf",
        "powerpc64" => "ppc64el",
        other => other,
    };
    [
        format!("/var/lib/dpkg/info/{name}.list"),
        format!("/var/lib/dpkg/info/{name}:{arch}.list"),
        format!("/var/lib/dpkg/info/{name}:{native}.list"),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The status file of a real Debian 12 root (mmdebstrap, variant apt) after the tests'
    /// packages were installed and `fleet-held` was held.
    const STATUS: &str = include_str!("../../testdata/debian-12.dpkg-status");

    #[test]
    fn a_real_status_file_lists_what_is_installed() {
        let installed = read_status(STATUS.as_bytes()).unwrap();
        assert_eq!(installed.len(), 93);
        let libc = installed.iter().find(|p| p.name == "libc6").unwrap();
        assert_eq!(libc.arch, "amd64");
        assert_eq!(libc.source_name, "glibc");
        assert_eq!(libc.source_version, libc.version);
        assert!(!libc.held);
        let held = installed.iter().find(|p| p.name == "fleet-held").unwrap();
        assert!(held.held);
        assert_eq!(held.version, "1.0");
        assert_eq!(held.source_name, "fleet-held");
        assert_eq!(installed.iter().filter(|p| p.held).count(), 1);
        // `Source: name (version)` when the binary's version differs from its source's.
        let with_version = installed
            .iter()
            .find(|p| p.source_version != p.version)
            .unwrap();
        assert!(!with_version.source_version.contains('('));
    }

    #[test]
    fn only_installed_packages_count() {
        let text = "\
Package: gone
Status: deinstall ok config-files
Version: 1.0
Architecture: amd64

Package: half
Status: install reinstreq half-installed
Version: 2.0
Architecture: amd64

Package: kept
Status: install ok installed
Version: 1:2.3-4
Architecture: all
Source: kept-src (1:2.3-1)
Description: a package
 with a long description
 Source: not a field

Package: last
Status: hold ok installed
Version: 5
";
        let installed = read_status(text.as_bytes()).unwrap();
        assert_eq!(installed.len(), 2);
        assert_eq!(installed[0].name, "kept");
        assert_eq!(installed[0].version, "1:2.3-4");
        assert_eq!(installed[0].source_name, "kept-src");
        assert_eq!(installed[0].source_version, "1:2.3-1");
        assert_eq!(installed[1].name, "last");
        assert!(installed[1].held);
        assert_eq!(installed[1].arch, "all");
    }
}
