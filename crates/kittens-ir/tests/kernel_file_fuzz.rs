//! A bounded fuzz of kernel-file input (`kittens_ir::serial::from_json`): every registry kernel written
//! out, then mutated — numbers replaced by hostile values, keys dropped, strings swapped, bytes flipped,
//! the text cut short — and read back. Each read must return a kernel or a typed error, never panic,
//! hang or allocate without bound (the reader's size caps); a kernel it accepts must write out again.
//! Seeded and bounded in count and time, so it runs in CI.

use kittens_hw::Target;
use kittens_ir::serial::{from_json, to_json};
use kittens_kernels::registry::ALL;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::time::{Duration, Instant};

const HOSTILE: [i64; 9] = [
    0,
    -1,
    1,
    255,
    1 << 16,
    i32::MAX as i64,
    1 << 40,
    i64::MAX,
    i64::MIN,
];

/// Every leaf of `v`, as a path of keys and indices.
fn leaves(v: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(k.clone());
                leaves(x, path, out);
                path.pop();
            }
            out.push(path.clone());
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(i.to_string());
                leaves(x, path, out);
                path.pop();
            }
            out.push(path.clone());
        }
        _ => out.push(path.clone()),
    }
}

fn at<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, k| match v {
        Value::Object(m) => m.get_mut(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// One structural mutation of `doc` at a random leaf.
fn mutate(doc: &Value, paths: &[Vec<String>], rng: &mut SmallRng) -> String {
    let mut d = doc.clone();
    for _ in 0..rng.gen_range(1..4) {
        let p = &paths[rng.gen_range(0..paths.len())];
        let Some(slot) = at(&mut d, p) else { continue };
        *slot = match rng.gen_range(0..6) {
            0 => Value::from(HOSTILE[rng.gen_range(0..HOSTILE.len())]),
            1 => Value::from(rng.gen::<f64>() * 1e300),
            2 => Value::from("NaN"),
            3 => Value::Null,
            4 => Value::from("__unknown__"),
            _ => Value::Array(vec![Value::from(-7); rng.gen_range(0..5)]),
        };
    }
    let text = serde_json::to_string(&d).expect("a Value writes");
    let mut bytes = text.into_bytes();
    match rng.gen_range(0..4) {
        0 => {
            let cut = rng.gen_range(0..bytes.len());
            bytes.truncate(cut);
        }
        1 => {
            let i = rng.gen_range(0..bytes.len());
            bytes[i] = rng.gen();
        }
        _ => {}
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn mutated_kernel_files_never_panic() {
    let mut sources = Vec::new();
    for e in &ALL {
        sources.push(e.build_default().expect("the default builds"));
        if let Ok(k) = e.build_for(Target::Sm90a) {
            sources.push(k);
        }
    }
    let mut rng = SmallRng::seed_from_u64(0x6b69_7474_656e_7366);
    let (start, budget) = (Instant::now(), Duration::from_secs(40));
    let (mut cases, mut accepted) = (0usize, 0usize);
    'outer: for _ in 0..10 {
        for k in &sources {
            let doc: Value = serde_json::from_str(&to_json(k)).expect("the writer writes JSON");
            let mut paths = Vec::new();
            leaves(&doc, &mut Vec::new(), &mut paths);
            for _ in 0..40 {
                if start.elapsed() > budget {
                    break 'outer;
                }
                let text = mutate(&doc, &paths, &mut rng);
                let r = std::panic::catch_unwind(|| from_json(&text).map(|k| to_json(&k)));
                match r {
                    Err(_) => panic!("reading a mutated `{}` panicked:\n{text:.2000}", k.name),
                    Ok(Ok(_)) => accepted += 1,
                    Ok(Err(e)) => assert!(!e.to_string().is_empty()),
                }
                cases += 1;
            }
        }
    }
    assert!(cases >= 200, "only {cases} cases in the time budget");
    // Some mutations are harmless (a name, a value in range): the reader is not refusing everything.
    assert!(
        accepted > 0,
        "every one of {cases} mutated files was refused"
    );
}
