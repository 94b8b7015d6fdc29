//! Private scratch folders and the two ways a file in one is touched: created exclusively, and read
//! back bounded.
//!
//! A scratch folder gets an unpredictable name from `mkdtemp` (through the `tempfile` crate), mode
//! 0700, and is removed when dropped; a folder someone else made is never reused, so nothing a
//! compiler or an emulated kernel reads, writes or runs there can have been planted. Files are still
//! created with `O_EXCL | O_NOFOLLOW` and read with `O_NOFOLLOW | O_NONBLOCK`, regular files only, up
//! to a stated size: a folder mistakenly shared, or a tool that left a link or a FIFO behind, gives an
//! error, never a write through a link, a hang or an unbounded read.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A fresh private folder under the system's temporary folder, removed when dropped.
#[derive(Debug)]
pub struct ScratchDir(tempfile::TempDir);

impl ScratchDir {
    /// A new folder `<tmp>/<prefix><random>`, mode 0700.
    pub fn new(prefix: &str) -> std::io::Result<ScratchDir> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
        // tempfile creates it 0700 already; say so here rather than rely on it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        Ok(ScratchDir(dir))
    }

    /// A new private folder inside `parent` (for one run inside a build folder).
    pub fn new_in(parent: &Path, prefix: &str) -> std::io::Result<ScratchDir> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        Ok(ScratchDir(dir))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// Creates `path` (which must not exist; a link in its place is not followed) with mode 0600 and
/// writes `bytes`.
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(bytes)
}

/// Opens `path` for reading without following a link and without blocking on a FIFO, and checks it is
/// a regular file of at most `max` bytes.
pub fn open_regular(path: &Path, max: u64) -> std::io::Result<(File, u64)> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.size() > max {
        return Err(std::io::Error::other(format!(
            "{} has {} bytes, more than the {max} expected",
            path.display(),
            meta.size()
        )));
    }
    Ok((f, meta.size()))
}

/// Reads a whole regular file of at most `max` bytes (see [`open_regular`]); a file that grows while
/// it is read is cut at `max + 1` bytes and refused.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let (f, len) = open_regular(path, max)?;
    let mut buf = Vec::with_capacity(len as usize);
    f.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "{} grew past {max} bytes while read",
            path.display()
        )));
    }
    Ok(buf)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_string(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_regular(path, max)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn scratch_folders_are_private_unpredictable_and_removed() {
        let (a, b) = (
            ScratchDir::new("kittens-t-").unwrap(),
            ScratchDir::new("kittens-t-").unwrap(),
        );
        assert_ne!(a.path(), b.path());
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        // The random part: at least 6 characters after the prefix, not the process id.
        let tail = name.strip_prefix("kittens-t-").expect("the prefix");
        assert!(
            tail.len() >= 6 && !tail.contains(&std::process::id().to_string()),
            "{name}"
        );
        let meta = std::fs::symlink_metadata(a.path()).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists(), "removed on drop");
    }

    #[test]
    fn writes_are_exclusive_and_never_follow_a_link() {
        let d = ScratchDir::new("kittens-t-").unwrap();
        let target = d.join("target");
        std::fs::write(&target, b"original").unwrap();
        write_new(&d.join("a"), b"x").unwrap();
        assert_eq!(
            std::fs::metadata(d.join("a")).unwrap().mode() & 0o777,
            0o600
        );
        assert!(
            write_new(&d.join("a"), b"y").is_err(),
            "an existing file is not reused"
        );
        std::os::unix::fs::symlink(&target, d.join("link")).unwrap();
        assert!(write_new(&d.join("link"), b"planted").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"original");
    }

    #[test]
    fn reads_refuse_links_fifos_and_oversized_files_without_hanging() {
        let d = ScratchDir::new("kittens-t-").unwrap();
        std::fs::write(d.join("ok"), b"12345").unwrap();
        assert_eq!(read_regular(&d.join("ok"), 5).unwrap(), b"12345");
        assert!(read_regular(&d.join("ok"), 4).is_err(), "over the bound");
        std::os::unix::fs::symlink(d.join("ok"), d.join("link")).unwrap();
        assert!(read_regular(&d.join("link"), 100).is_err());
        std::os::unix::fs::symlink("/dev/zero", d.join("zero")).unwrap();
        assert!(read_regular(&d.join("zero"), 100).is_err());
        let fifo = std::ffi::CString::new(d.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid C string; mkfifo has no other preconditions.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let err = read_regular(&d.join("fifo"), 100).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
