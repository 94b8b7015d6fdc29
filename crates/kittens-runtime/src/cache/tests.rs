use super::*;
use crate::trust::test_env::{chmod, env};

/// The report the entries of these tests carry (a compiler's report is any serde type).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Report {
    kernel: String,
    registers: u32,
    warnings: Vec<String>,
}

fn report() -> Report {
    Report {
        kernel: "k".into(),
        registers: 32,
        warnings: vec!["none".into()],
    }
}

/// A stand-in cubin: an ELF header's magic and `len` bytes of a pattern seeded by `seed`.
fn fake_cubin(len: usize, seed: u8) -> Vec<u8> {
    let mut v = b"\x7fELF".to_vec();
    v.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    v
}

/// A private temporary folder (removed when dropped) and a cache folder `cuda` inside it.
fn fresh() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("cuda");
    (t, d)
}

#[test]
fn location_rule_and_size_bound_from_the_environment() {
    assert_eq!(
        cache_root(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
        Ok(PathBuf::from("/x/kittens"))
    );
    let e = cache_root(env(&[("KITTENS_CACHE", ".cache")])).unwrap_err();
    assert!(e.to_string().contains("relative"), "{e}");
    // The compile caches' own root, when given, comes first; a relative one is refused.
    assert_eq!(
        cache_root(env(&[("KITTENS_COMPILE_CACHE", "/run/c"), ("HOME", "/h")])),
        Ok(PathBuf::from("/run/c"))
    );
    let e = cache_root(env(&[("KITTENS_COMPILE_CACHE", "c"), ("HOME", "/h")])).unwrap_err();
    assert!(e.to_string().contains("KITTENS_COMPILE_CACHE"), "{e}");
    assert_eq!(
        cache_root(env(&[("KITTENS_COMPILE_CACHE", ""), ("HOME", "/h")])),
        Ok(PathBuf::from("/h/.cache/kittens"))
    );
    assert_eq!(max_bytes(env(&[])), Ok(DEFAULT_MAX_BYTES));
    assert_eq!(
        max_bytes(env(&[("KITTENS_CACHE_MAX_BYTES", "4096")])),
        Ok(4096)
    );
    assert!(matches!(
        max_bytes(env(&[("KITTENS_CACHE_MAX_BYTES", "1G")])),
        Err(CacheError::BadMaxBytes(_))
    ));
}

#[test]
fn shared_folders_on_disk_are_refused() {
    let (_t, dir) = fresh();
    KernelCache::at(&dir, Compiler::Nvrtc).expect("a fresh private folder is accepted");
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);
    chmod(&dir, 0o777);
    let r = KernelCache::at(&dir, Compiler::Nvrtc);
    assert!(
        matches!(
            r,
            Err(CacheError::Untrusted(TrustError::WorldWritable { .. }))
        ),
        "{r:?}"
    );
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("writable by every user"));
    chmod(&dir, 0o770);
    let r = KernelCache::at(&dir, Compiler::Nvrtc);
    assert!(
        matches!(
            r,
            Err(CacheError::Untrusted(TrustError::GroupWritable { .. }))
        ),
        "{r:?}"
    );
    // A folder above the cache that others may write: the cache could be swapped, refused too.
    chmod(&dir, 0o700);
    chmod(dir.parent().unwrap(), 0o777);
    let r = KernelCache::at(&dir, Compiler::Nvrtc);
    assert!(
        matches!(r, Err(CacheError::Untrusted(TrustError::WorldWritable { ref path, .. })) if Path::new(path) == dir.parent().unwrap()),
        "{r:?}"
    );
    chmod(dir.parent().unwrap(), 0o700);
    assert!(matches!(
        KernelCache::at(Path::new("relative/cache"), Compiler::Nvrtc),
        Err(CacheError::Untrusted(TrustError::Relative { .. }))
    ));
}

#[test]
fn truncated_or_corrupted_entries_are_misses() {
    let (_t, dir) = fresh();
    let cache = KernelCache::at(&dir, Compiler::Nvrtc).unwrap();
    let cubin = fake_cubin(4096, 1);
    cache.put("k1", &cubin, &report()).unwrap();
    let (got, rep) = cache.get::<Report>("k1").expect("intact entry hits");
    assert_eq!((got, rep.registers), (cubin.clone(), 32));
    let (cubin_path, record_path) = cache.entry_paths("k1");
    // Truncated cubin.
    std::fs::write(&cubin_path, &cubin[..1000]).unwrap();
    assert!(cache.get::<Report>("k1").is_none());
    // Same length, one flipped byte.
    let mut bad = cubin.clone();
    bad[2000] ^= 1;
    std::fs::write(&cubin_path, &bad).unwrap();
    assert!(cache.get::<Report>("k1").is_none());
    // Longer than the record says.
    std::fs::write(&cubin_path, fake_cubin(8192, 1)).unwrap();
    assert!(cache.get::<Report>("k1").is_none());
    // Truncated record.
    cache.put("k1", &cubin, &report()).unwrap();
    let rec = std::fs::read(&record_path).unwrap();
    std::fs::write(&record_path, &rec[..rec.len() / 2]).unwrap();
    assert!(cache.get::<Report>("k1").is_none());
    // A cubin without its record.
    std::fs::remove_file(&record_path).unwrap();
    assert!(cache.get::<Report>("k1").is_none());
    // A recompile replaces the entry.
    cache.put("k1", &cubin, &report()).unwrap();
    assert_eq!(cache.get::<Report>("k1").unwrap().0, cubin);
}

/// Links, FIFOs and oversized files in place of an entry are misses, read nothing and never block.
#[test]
fn foreign_entries_are_never_trusted_and_never_hang() {
    let (t, dir) = fresh();
    let cache = KernelCache::at(&dir, Compiler::Nvrtc).unwrap();
    let cubin = fake_cubin(4096, 2);
    cache.put("good", &cubin, &report()).unwrap();
    let (good_cubin, good_record) = cache.entry_paths("good");
    // A record linked to /dev/zero (an endless read) and to a good entry's record elsewhere.
    cache.put("zero", &cubin, &report()).unwrap();
    let (_, zero_record) = cache.entry_paths("zero");
    std::fs::remove_file(&zero_record).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &zero_record).unwrap();
    assert!(cache.get::<Report>("zero").is_none());
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::copy(&good_record, outside.join("r.json")).unwrap();
    std::fs::copy(&good_cubin, outside.join("c.cubin")).unwrap();
    cache.put("linked", &cubin, &report()).unwrap();
    let (linked_cubin, linked_record) = cache.entry_paths("linked");
    std::fs::remove_file(&linked_cubin).unwrap();
    std::os::unix::fs::symlink(outside.join("c.cubin"), &linked_cubin).unwrap();
    assert!(
        cache.get::<Report>("linked").is_none(),
        "a linked cubin is not followed"
    );
    std::fs::remove_file(&linked_cubin).unwrap();
    std::fs::copy(&good_cubin, &linked_cubin).unwrap();
    std::fs::remove_file(&linked_record).unwrap();
    std::os::unix::fs::symlink(outside.join("r.json"), &linked_record).unwrap();
    assert!(
        cache.get::<Report>("linked").is_none(),
        "a linked record is not followed"
    );
    // A FIFO as the record: opening it must not wait for a writer.
    cache.put("fifo", &cubin, &report()).unwrap();
    let (_, fifo_record) = cache.entry_paths("fifo");
    std::fs::remove_file(&fifo_record).unwrap();
    let c = std::ffi::CString::new(fifo_record.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo has no other preconditions.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = cache.clone();
    std::thread::spawn(move || tx.send(reader.get::<Report>("fifo").is_none()).unwrap());
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "a FIFO entry is a miss, at once"
    );
    // A record over the size bound (sparse: no disk used).
    let (_, big_record) = cache.entry_paths("good");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&big_record)
        .unwrap()
        .set_len(MAX_RECORD_BYTES + 1)
        .unwrap();
    assert!(cache.get::<Report>("good").is_none());
    // Keys cannot name other files.
    for key in ["../x", ".hidden", "a/b", ""] {
        assert!(cache.get::<Report>(key).is_none());
        assert!(cache.put(key, &cubin, &report()).is_err(), "{key:?}");
    }
    // The FIFO and the links in the cache are removed by the next sweep, not kept as entries.
    drop(KernelCache::at(&dir, Compiler::Nvrtc).unwrap());
    assert!(std::fs::symlink_metadata(&fifo_record).is_err());
    assert!(std::fs::symlink_metadata(&zero_record).is_err());
}

#[test]
fn stale_temporaries_are_removed_when_the_cache_opens() {
    let (_t, dir) = fresh();
    let cache = KernelCache::at(&dir, Compiler::Nvrtc).unwrap();
    let (old, new) = (dir.join(".x.cubin.1.0.tmp"), dir.join(".x.cubin.2.0.tmp"));
    std::fs::write(&old, b"left by a writer that died").unwrap();
    std::fs::write(&new, b"a writer at work").unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    drop(cache);
    KernelCache::at(&dir, Compiler::Nvrtc).unwrap();
    assert!(!old.exists(), "a temporary older than an hour is removed");
    assert!(new.exists(), "a fresh one may belong to a writer at work");
}

#[test]
fn the_size_bound_evicts_the_least_recently_used_entries() {
    let (_t, dir) = fresh();
    let cache = KernelCache::with_max_bytes(&dir, Compiler::Nvrtc, 10_000).unwrap();
    let c = |s| fake_cubin(2500, s);
    let t0 = SystemTime::now() - Duration::from_secs(100);
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        cache.put(key, &c(i as u8), &report()).unwrap();
        // Give each entry a distinct age: a oldest.
        for p in [cache.entry_paths(key).0, cache.entry_paths(key).1] {
            File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(t0 + Duration::from_secs(10 * i as u64))
                .unwrap();
        }
    }
    // A hit on `a` makes it the most recently used.
    assert!(cache.get::<Report>("a").is_some());
    // A fourth entry pushes the total over 10 000 bytes: `b`, now the least recently used, goes.
    cache.put("d", &c(3), &report()).unwrap();
    let present: Vec<bool> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| cache.get::<Report>(k).is_some())
        .collect();
    assert_eq!(present, [true, false, true, true]);
    let total: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total <= 10_000, "{total}");
}

/// Writers and readers of one key at once: every read is a miss or the whole entry of one writer,
/// and every write succeeds.
#[test]
fn concurrent_writers_and_readers_never_see_half_an_entry() {
    let (_t, dir) = fresh();
    let cache = KernelCache::at(&dir, Compiler::Nvrtc).unwrap();
    let versions: Vec<Vec<u8>> = (0..4).map(|s| fake_cubin(1 << 18, s)).collect();
    std::thread::scope(|s| {
        for v in &versions {
            let cache = &cache;
            s.spawn(move || {
                for _ in 0..20 {
                    cache.put("shared", v, &report()).expect("write succeeds");
                }
            });
        }
        for _ in 0..2 {
            let (cache, versions) = (&cache, &versions);
            s.spawn(move || {
                for _ in 0..200 {
                    if let Some((c, _)) = cache.get::<Report>("shared") {
                        assert!(versions.contains(&c), "a read returned a mixed cubin");
                    }
                }
            });
        }
    });
    // Writers of different cubins under one key may leave one writer's cubin beside another's
    // record: that reads as a miss (recompiled and rewritten), never as a mixed cubin.
    if let Some((c, _)) = cache.get::<Report>("shared") {
        assert!(versions.contains(&c));
    }
    // Writers of the same cubin (one key is one source, and NVRTC's output for it) always leave
    // a whole entry behind.
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (cache, v) = (&cache, &versions[0]);
            s.spawn(move || {
                for _ in 0..20 {
                    cache.put("same", v, &report()).expect("write succeeds");
                }
            });
        }
    });
    let (c, _) = cache
        .get::<Report>("same")
        .expect("an entry is there at the end");
    assert_eq!(c, versions[0]);
    // No temporary file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// An entry whose record holds another report type (another compiler's, or an older format) is a
/// miss, never a report made up of defaults; each compiler's outputs carry its own extension.
#[test]
fn a_record_of_another_report_type_is_a_miss() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Other {
        kind: String,
    }
    let (_t, dir) = fresh();
    let cache = KernelCache::at(&dir, Compiler::AmdClang).unwrap();
    let text = b"\t.amdgcn_target \"amdgcn-amd-amdhsa--gfx950\"\n".to_vec();
    cache.put("asm", &text, &report()).unwrap();
    assert!(cache.get::<Other>("asm").is_none());
    assert_eq!(cache.get::<Report>("asm").unwrap().0, text);
    let other = Other { kind: "asm".into() };
    cache.put("asm", &text, &other).unwrap();
    assert!(cache.get::<Report>("asm").is_none());
    assert_eq!(cache.get::<Other>("asm"), Some((text, other)));
    let (output, record) = cache.entry_paths("asm");
    assert_eq!(output.extension().unwrap(), "bin");
    assert_eq!(record.extension().unwrap(), "json");
    // The size bound counts this compiler's files: the sweep of a tiny bound removes the entry.
    drop(cache);
    let tiny = KernelCache::with_max_bytes(&dir, Compiler::AmdClang, 1).unwrap();
    assert!(tiny.get::<Other>("asm").is_none());
    assert!(!output.exists() && !record.exists());
}
