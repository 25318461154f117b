//! The real `fleet-agent` against a test service, on throwaway roots with the real apt/dpkg and
//! dnf/rpm (issue 28): never this machine's own package database. Needs root (chroot, mounts),
//! mmdebstrap, dpkg-dev, rpm, dnf, dnf-plugins-core and createrepo-c (`.ci/run` installs them).

// Test code inspects the service's database directly: the row layer guards the service, not
// its tests.
#![allow(clippy::disallowed_methods)]

mod debian;
mod hostile;
mod packages;
mod packaging;
mod rhel;
mod roots;
mod service;
mod units;
