//! What the tests of the trust rules and of the cache built on them share: a fixed environment
//! (the variable reader that [`super::user_cache_path`] and `crate::cache` take) and `chmod`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A variable reader over `pairs` alone (a variable not among them is unset).
pub(crate) fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| OsString::from(v))
    }
}

pub(crate) fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}
