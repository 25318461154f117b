//! A small disk of a test's own: a tmpfs of a few megabytes mounted on a temp dir (root only),
//! filled to the last byte and freed again, as a real disk fills.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

/// A tmpfs mounted on a temp dir; unmounted (and the dir removed) when dropped.
pub struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `megabytes`. Mounting needs root: the error says so.
    pub fn mount(megabytes: u64) -> anyhow::Result<Tmpfs> {
        let dir = tempfile::Builder::new().prefix("fleet-disk-").tempdir()?;
        let path = dir.path().join("disk");
        std::fs::create_dir(&path)?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(&path)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "mounting a tmpfs at {} failed ({status}): a full disk needs root to make",
            path.display()
        );
        Ok(Tmpfs { path, _dir: dir })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a filler file until the disk is full: how many bytes it took.
    pub fn fill(&self) -> std::io::Result<u64> {
        let mut file = std::fs::File::create(self.filler())?;
        let block = vec![0xa5u8; 64 * 1024];
        let mut written = 0u64;
        let mut size = block.len();
        // Big blocks, then smaller ones, down to the last byte.
        while size > 0 {
            match file.write(&block[..size]) {
                Ok(0) => size /= 2,
                Ok(n) => written += n as u64,
                Err(err) if err.raw_os_error() == Some(28) => size /= 2, // ENOSPC
                Err(err) => return Err(err),
            }
        }
        Ok(written)
    }

    /// Space returns: the filler is removed.
    pub fn free(&self) -> std::io::Result<()> {
        std::fs::remove_file(self.filler())
    }

    fn filler(&self) -> PathBuf {
        self.path.join("filler")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}
