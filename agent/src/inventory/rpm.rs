//! The rpm database, as `rpm -qa --queryformat` prints it.

/// The query format [`parse_query`] reads: one package per line, tab-separated.
pub const QUERY_FORMAT: &str =
    "%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\t%{SOURCERPM}\\n";

/// An installed package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    /// `[epoch:]version-release`, the epoch only when it is not 0 (as dnf prints it).
    pub version: String,
    pub arch: String,
    /// The source package: the `SOURCERPM` without its version (`openssl-3.0.7-27.el9.src.rpm`
    /// → `openssl`).
    pub source_name: Option<String>,
    pub source_version: Option<String>,
}

/// `[epoch:]version-release`, leaving out an epoch of 0.
pub fn evr(epoch: &str, version: &str, release: &str) -> String {
    match epoch {
        "" | "0" | "(none)" => format!("{version}-{release}"),
        epoch => format!("{epoch}:{version}-{release}"),
    }
}

/// Splits `name-version-release` (what remains of a NEVRA without its architecture).
pub fn split_nvr(nvr: &str) -> Option<(&str, &str, &str)> {
    let mut parts = nvr.rsplitn(3, '-');
    let release = parts.next()?;
    let version = parts.next()?;
    let name = parts.next()?;
    (!name.is_empty() && !version.is_empty() && !release.is_empty())
        .then_some((name, version, release))
}

/// The packages of `rpm -qa --queryformat QUERY_FORMAT`; the GPG keys rpm lists as
/// `gpg-pubkey` packages are left out.
pub fn parse_query(text: &str) -> Vec<Installed> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [name, epoch, version, release, arch, source] = fields[..] else {
            continue;
        };
        if name == "gpg-pubkey" || name.is_empty() {
            continue;
        }
        let (source_name, source_version) = source
            .strip_suffix(".src.rpm")
            .or_else(|| source.strip_suffix(".nosrc.rpm"))
            .and_then(split_nvr)
            .map(|(n, v, r)| (Some(n.to_owned()), Some(format!("{v}-{r}"))))
            .unwrap_or((None, None));
        out.push(Installed {
            name: name.to_owned(),
            version: evr(epoch, version, release),
            arch: arch.to_owned(),
            source_name,
            source_version,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_of_the_rpm_database() {
        // `rpm -qa --queryformat QUERY_FORMAT` in the tests' rpm root, and lines as Rocky 9
        // prints them.
        let text = "fleet-pulls\t0\t1.0\t1\tnoarch\tfleet-pulls-1.0-1.src.rpm
fleet-epoch\t1\t2.1\t1\tnoarch\tfleet-epoch-2.1-1.src.rpm
openssl-libs\t1\t3.0.7\t27.el9\tx86_64\topenssl-3.0.7-27.el9.src.rpm
gpg-pubkey\t0\t350d275d\t6279464b\t(none)\t(none)
kernel-core\t0\t5.14.0\t427.13.1.el9_4\tx86_64\tkernel-5.14.0-427.13.1.el9_4.src.rpm
broken line
";
        let installed = parse_query(text);
        assert_eq!(installed.len(), 4);
        assert_eq!(installed[0].version, "1.0-1");
        assert_eq!(installed[1].version, "1:2.1-1");
        assert_eq!(installed[2].name, "openssl-libs");
        assert_eq!(installed[2].source_name.as_deref(), Some("openssl"));
        assert_eq!(installed[2].source_version.as_deref(), Some("3.0.7-27.el9"));
        assert_eq!(installed[3].source_name.as_deref(), Some("kernel"));
    }

    #[test]
    fn nevra_pieces() {
        assert_eq!(
            split_nvr("fleet-hello-1.1-1"),
            Some(("fleet-hello", "1.1", "1"))
        );
        assert_eq!(split_nvr("a-1:2-3"), Some(("a", "1:2", "3")));
        assert_eq!(split_nvr("nodash"), None);
        assert_eq!(split_nvr("-1-2"), None);
        assert_eq!(evr("(none)", "1", "2"), "1-2");
    }
}
