//! Packages made by the tests (dpkg-deb, rpmbuild) and the local repositories that offer them:
//! a flat apt repository whose `Release` names the suite (`bookworm-security` with label
//! `Debian-Security` makes apt see a security update), and a dnf repository made by
//! createrepo_c with an `updateinfo.xml` added by modifyrepo_c.

use std::{path::Path, process::Command};

fn must(command: &mut Command, what: &str) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (is it installed? .ci/run installs it)"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A package the tests build.
pub struct Spec<'a> {
    pub name: &'a str,
    pub version: &'a str,
    /// Debian `Depends:` / rpm `Requires:`.
    pub depends: Option<&'a str>,
    /// Extra files: (path in the package, file to copy in).
    pub files: Vec<(&'a str, &'a Path)>,
    /// A `postinst` script (Debian).
    pub postinst: Option<&'a str>,
    /// rpm `Provides:`.
    pub provides: Vec<String>,
}

impl<'a> Spec<'a> {
    pub fn new(name: &'a str, version: &'a str) -> Spec<'a> {
        Spec {
            name,
            version,
            depends: None,
            files: Vec::new(),
            postinst: None,
            provides: Vec::new(),
        }
    }

    pub fn provides(mut self, provides: Vec<String>) -> Spec<'a> {
        self.provides = provides;
        self
    }

    pub fn postinst(mut self, script: &'a str) -> Spec<'a> {
        self.postinst = Some(script);
        self
    }

    pub fn depends(mut self, depends: &'a str) -> Spec<'a> {
        self.depends = Some(depends);
        self
    }

    pub fn file(mut self, path: &'a str, from: &'a Path) -> Spec<'a> {
        self.files.push((path, from));
        self
    }
}

/// Builds `spec` as a `.deb` into `dir`.
pub fn deb(spec: &Spec<'_>, dir: &Path) {
    let tree = tempfile::tempdir().expect("a package tree");
    let root = tree.path();
    std::fs::create_dir_all(root.join("DEBIAN")).expect("DEBIAN");
    let share = root.join("usr/share").join(spec.name);
    std::fs::create_dir_all(&share).expect("share");
    std::fs::write(share.join("version"), format!("{}\n", spec.version)).expect("version file");
    for (path, from) in &spec.files {
        let target = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().expect("a parent")).expect("parent");
        std::fs::copy(from, &target).expect("copy a file into the package");
    }
    let mut control = format!(
        "Package: {}\nVersion: {}\nArchitecture: all\nMaintainer: Fleet Tests <tests@fleet.test>\nSource: {}-src\nDescription: a package of the agent's tests\n",
        spec.name, spec.version, spec.name
    );
    if let Some(depends) = spec.depends {
        control.push_str(&format!("Depends: {depends}\n"));
    }
    std::fs::write(root.join("DEBIAN/control"), control).expect("control");
    if let Some(script) = spec.postinst {
        let file = root.join("DEBIAN/postinst");
        std::fs::write(&file, script).expect("postinst");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    must(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-b"])
            .arg(root)
            .arg(dir.join(format!("{}_{}_all.deb", spec.name, spec.version))),
        "dpkg-deb",
    );
}

/// Indexes the `.deb`s in `dir` as a flat repository of `suite` labelled `label`.
pub fn apt_repo(dir: &Path, suite: &str, label: &str) {
    let out = Command::new("dpkg-scanpackages")
        .args(["--multiversion", ".", "/dev/null"])
        .current_dir(dir)
        .output()
        .expect("dpkg-scanpackages (dpkg-dev)");
    assert!(
        out.status.success(),
        "dpkg-scanpackages: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.join("Packages"), &out.stdout).expect("Packages");
    let digest = {
        use sha2::Digest as _;
        let hash = sha2::Sha256::digest(&out.stdout);
        hash.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let release = format!(
        "Origin: Debian\nLabel: {label}\nSuite: {suite}\nCodename: bookworm\nDate: Sat, 01 Jan 2000 00:00:00 UTC\nSHA256:\n {digest} {} Packages\n",
        out.stdout.len()
    );
    std::fs::write(dir.join("Release"), release).expect("Release");
}

/// Builds `spec` (with `release` and `epoch`) as a noarch `.rpm` into `dir`.
pub fn rpm(spec: &Spec<'_>, release: &str, epoch: Option<u32>, dir: &Path) {
    let top = tempfile::tempdir().expect("an rpmbuild tree");
    let mut text = format!(
        "Name: {}\nVersion: {}\nRelease: {release}\nSummary: a package of the agent's tests\nLicense: MIT\nBuildArch: noarch\n",
        spec.name, spec.version
    );
    if let Some(epoch) = epoch {
        text.push_str(&format!("Epoch: {epoch}\n"));
    }
    if let Some(depends) = spec.depends {
        text.push_str(&format!("Requires: {depends}\n"));
    }
    for provided in &spec.provides {
        text.push_str(&format!("Provides: {provided}\n"));
    }
    text.push_str(&format!(
        "%description\nA package of the agent's tests.\n%install\nmkdir -p %{{buildroot}}/usr/share/{name}\necho {version} > %{{buildroot}}/usr/share/{name}/version\n%files\n/usr/share/{name}/version\n",
        name = spec.name,
        version = spec.version
    ));
    let file = top.path().join(format!("{}.spec", spec.name));
    std::fs::write(&file, text).expect("spec");
    must(
        Command::new("rpmbuild")
            .arg("-bb")
            .arg("--quiet")
            .arg("--define")
            .arg(format!("_topdir {}", top.path().display()))
            .arg("--define")
            .arg(format!("_rpmdir {}", dir.display()))
            .arg("--define")
            .arg("_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm")
            .arg(&file),
        "rpmbuild",
    );
}

/// Makes `dir` a dnf repository, with `updateinfo` (an `updateinfo.xml` text) when given.
pub fn dnf_repo(dir: &Path, updateinfo: Option<&str>) {
    must(
        Command::new("createrepo_c").arg("--quiet").arg(dir),
        "createrepo_c (createrepo-c)",
    );
    if let Some(xml) = updateinfo {
        let holder = tempfile::tempdir().expect("a directory for updateinfo.xml");
        let named = holder.path().join("updateinfo.xml");
        std::fs::write(&named, xml).expect("updateinfo.xml");
        must(
            Command::new("modifyrepo_c")
                .arg(&named)
                .arg(dir.join("repodata")),
            "modifyrepo_c",
        );
    }
}
