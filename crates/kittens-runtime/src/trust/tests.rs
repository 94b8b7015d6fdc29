use super::test_env::{chmod, env};
use super::*;

#[test]
fn location_rule_order_and_absolute_paths() {
    let all = [
        ("KITTENS_CACHE", "/k"),
        ("XDG_CACHE_HOME", "/x"),
        ("HOME", "/h"),
    ];
    assert_eq!(user_cache_path(env(&all)), Ok(PathBuf::from("/k")));
    assert_eq!(
        user_cache_path(env(&all[1..])),
        Ok(PathBuf::from("/x/kittens"))
    );
    assert_eq!(
        user_cache_path(env(&all[2..])),
        Ok(PathBuf::from("/h/.cache/kittens"))
    );
    assert_eq!(
        toolchains_dir(env(&all[2..])),
        Ok(PathBuf::from("/h/.cache/kittens/toolchains"))
    );
    // Empty values count as unset.
    assert_eq!(
        user_cache_path(env(&[("KITTENS_CACHE", ""), ("HOME", "/h")])),
        Ok(PathBuf::from("/h/.cache/kittens"))
    );
    // A relative KITTENS_CACHE would be the current folder's: refused, not used.
    let e = user_cache_path(env(&[("KITTENS_CACHE", ".cache"), ("HOME", "/h")])).unwrap_err();
    assert!(matches!(&e, TrustError::Relative { var, .. } if var == "KITTENS_CACHE"));
    assert!(
        e.to_string()
            .contains("KITTENS_CACHE=.cache is a relative path"),
        "{e}"
    );
    // A relative XDG_CACHE_HOME is invalid by the XDG specification: ignored.
    assert_eq!(
        user_cache_path(env(&[("XDG_CACHE_HOME", "cache"), ("HOME", "/h")])),
        Ok(PathBuf::from("/h/.cache/kittens"))
    );
    assert!(matches!(
        user_cache_path(env(&[("HOME", "home")])),
        Err(TrustError::Relative { .. })
    ));
    assert_eq!(user_cache_path(env(&[])), Err(TrustError::NoLocation));
}

#[test]
fn mode_rule() {
    let p = Path::new("/x");
    // /tmp: root's, sticky, world-writable: fine on the way, never as the folder itself.
    assert_eq!(check_mode(p, 0o41777, 0, 1000, Role::Ancestor), Ok(()));
    assert!(matches!(
        check_mode(p, 0o41777, 0, 0, Role::OwnFolder),
        Err(TrustError::WorldWritable { mode: 0o1777, .. })
    ));
    // Sticky but not root's: someone else's shared folder.
    assert!(matches!(
        check_mode(p, 0o41777, 1000, 1000, Role::Ancestor),
        Err(TrustError::WorldWritable { .. })
    ));
    assert!(matches!(
        check_mode(p, 0o40770, 1000, 1000, Role::Ancestor),
        Err(TrustError::GroupWritable { mode: 0o770, .. })
    ));
    assert!(matches!(
        check_mode(p, 0o100775, 0, 1000, Role::File),
        Err(TrustError::GroupWritable { .. })
    ));
    assert!(matches!(
        check_mode(p, 0o40700, 0, 1000, Role::OwnFolder),
        Err(TrustError::NotOwned {
            owner: 0,
            me: 1000,
            ..
        })
    ));
    assert!(matches!(
        check_mode(p, 0o40755, 1001, 1000, Role::Ancestor),
        Err(TrustError::NotOwned { .. })
    ));
    assert_eq!(check_mode(p, 0o40755, 0, 1000, Role::Ancestor), Ok(()));
    assert_eq!(check_mode(p, 0o40700, 1000, 1000, Role::OwnFolder), Ok(()));
    assert_eq!(check_mode(p, 0o100755, 0, 1000, Role::File), Ok(()));
}

#[test]
fn planted_files_in_shared_folders_are_refused_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let tool = root.join("bin/tool");
    std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
    chmod(&root.join("bin"), 0o755);
    std::fs::write(&tool, b"#!/bin/sh\n").unwrap();
    chmod(&tool, 0o755);
    assert_eq!(check_file(&tool).unwrap(), tool.canonicalize().unwrap());
    // The folder on the way made writable by every user, then by the group.
    chmod(&root.join("bin"), 0o777);
    assert!(matches!(
        check_file(&tool),
        Err(TrustError::WorldWritable { .. })
    ));
    chmod(&root.join("bin"), 0o775);
    let e = check_file(&tool).unwrap_err();
    assert!(matches!(e, TrustError::GroupWritable { .. }));
    assert!(
        e.to_string()
            .contains(&root.join("bin").display().to_string()),
        "{e}"
    );
    chmod(&root.join("bin"), 0o755);
    // The file itself group-writable.
    chmod(&tool, 0o775);
    assert!(matches!(
        check_file(&tool),
        Err(TrustError::GroupWritable { .. })
    ));
    chmod(&tool, 0o755);
    // A link to a file in a shared folder: the link is fine, its target is not.
    let shared = root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("tool"), b"").unwrap();
    chmod(&shared, 0o777);
    std::os::unix::fs::symlink(shared.join("tool"), root.join("bin/link")).unwrap();
    assert!(matches!(
        check_file(&root.join("bin/link")),
        Err(TrustError::WorldWritable { .. })
    ));
    // A folder where a file is expected.
    assert!(matches!(
        check_file(&root.join("bin")),
        Err(TrustError::WrongKind { .. })
    ));
    chmod(&shared, 0o700);
}

#[test]
fn a_cached_file_needs_a_private_cache_even_under_a_sticky_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let zig = cache.join("toolchains/ziglang/zig");
    std::fs::create_dir_all(zig.parent().unwrap()).unwrap();
    std::fs::write(&zig, b"").unwrap();
    chmod(&zig, 0o755);
    for d in [
        &cache,
        &cache.join("toolchains"),
        &cache.join("toolchains/ziglang"),
    ] {
        chmod(d, 0o700);
    }
    assert!(check_cached_file(&cache, &zig).is_ok());
    // As /tmp is: sticky and world-writable. Fine above a cache (check_file alone accepts it when
    // root owns it), never as the cache or inside it.
    for d in [cache.clone(), cache.join("toolchains")] {
        chmod(&d, 0o1777);
        let e = check_cached_file(&cache, &zig).unwrap_err();
        assert!(matches!(e, TrustError::WorldWritable { .. }), "{e}");
        chmod(&d, 0o700);
    }
    assert!(check_cached_file(Path::new("/elsewhere"), &zig).is_err());
}

#[test]
fn the_users_cache_is_created_private_and_a_shared_one_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("a/b/kittens");
    let got = ensure_own_dir(&cache).unwrap();
    assert_eq!(got, cache.canonicalize().unwrap());
    for d in [tmp.path().join("a"), tmp.path().join("a/b"), cache.clone()] {
        assert_eq!(
            std::fs::metadata(&d).unwrap().mode() & 0o7777,
            0o700,
            "{}",
            d.display()
        );
    }
    chmod(&cache, 0o770);
    assert!(matches!(
        ensure_own_dir(&cache),
        Err(TrustError::GroupWritable { .. })
    ));
    chmod(&cache, 0o1777);
    assert!(matches!(
        ensure_own_dir(&cache),
        Err(TrustError::WorldWritable { .. })
    ));
    chmod(&cache, 0o700);
    assert!(matches!(
        ensure_own_dir(Path::new("relative/cache")),
        Err(TrustError::Relative { .. })
    ));
}

#[test]
fn explicit_variables_must_be_absolute_and_checked() {
    let e = explicit("KITTENS_HIP_LIB", Some("./evil.so".into()), Role::File).unwrap_err();
    assert!(
        e.to_string()
            .contains("KITTENS_HIP_LIB=./evil.so is a relative path"),
        "{e}"
    );
    assert_eq!(explicit("X", None, Role::File), Ok(None));
    assert_eq!(explicit("X", Some("".into()), Role::File), Ok(None));
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("lib.so");
    std::fs::write(&lib, b"").unwrap();
    chmod(&lib, 0o644);
    assert_eq!(
        explicit("X", Some(lib.clone().into()), Role::File),
        Ok(Some(lib.clone()))
    );
    chmod(&lib, 0o666);
    assert!(matches!(
        explicit("X", Some(lib.into()), Role::File),
        Err(TrustError::WorldWritable { .. })
    ));
}

#[test]
fn which_skips_relative_path_entries() {
    // Tests run in the crate's folder, which holds Cargo.toml: found there only through a relative
    // PATH entry, which is skipped.
    assert!(Path::new("Cargo.toml").is_file());
    for path in [".", "", "./", "src/.."] {
        assert_eq!(
            which_in(Path::new("Cargo.toml"), Some(path.into())),
            None,
            "PATH={path:?}"
        );
    }
    assert_eq!(which_in(Path::new("./Cargo.toml"), None), None);
    let here = std::env::current_dir().unwrap();
    assert_eq!(
        which_in(Path::new("Cargo.toml"), Some(here.clone().into())),
        Some(here.join("Cargo.toml"))
    );
}
