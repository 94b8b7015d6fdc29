//! Kernels as files (`kittens_ir::serial`): every registry kernel survives JSON and back unchanged and
//! interprets to the same bits; malformed files are typed errors that name what is wrong.

use kittens_hw::Target;
use kittens_ir::serial::{from_json, to_json, LoadError};
use kittens_ir::Kernel;
use kittens_kernels::registry::ALL;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::Value;

fn round_trip(k: &Kernel, what: &str) -> Kernel {
    let text = to_json(k);
    let back = from_json(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(&back, k, "{what}: the kernel read back differs");
    // Writing it again gives the same text (stable field order, exact floats).
    assert_eq!(to_json(&back), text, "{what}: second write differs");
    back
}

#[test]
fn every_registry_kernel_round_trips_on_every_target() {
    let mut n = 0;
    for e in &ALL {
        let k = e.build_default().unwrap();
        round_trip(&k, &format!("{} default", e.name));
        n += 1;
        for t in Target::ALL {
            if let Ok(k) = e.build_for(t) {
                round_trip(&k, &format!("{} for {t}", e.name));
                n += 1;
            }
            for v in e.variants {
                if let Ok(k) = e.build_variant(t, Some(v.name)) {
                    round_trip(&k, &format!("{} {} for {t}", e.name, v.name));
                    n += 1;
                }
            }
        }
    }
    assert!(n >= 20, "only {n} kernels built");
}

/// The kernel read back runs on the interpreter to the same bits as the one built (the registry's
/// CPU problems at their default sizes, inputs drawn as `kittens run` draws them).
#[test]
fn registry_kernels_read_back_interpret_to_the_same_bits() {
    for e in &ALL {
        let p = e.default_problem().unwrap();
        let plan = p.plan(Target::Cpu).unwrap();
        let stages = p.stages(Target::Cpu, &plan).unwrap();
        let st = &stages[0];
        let back = round_trip(&st.kernel, e.name);
        let mut rng = SmallRng::seed_from_u64(7);
        let inputs = p.draw(&st.kernel, &st.launch, &mut rng);
        let run = |k: &Kernel| {
            kittens_kernels::exec::interpret(
                k,
                &st.launch.params,
                inputs.clone(),
                &st.launch.outputs,
            )
            .unwrap()
            .0
        };
        let (a, b) = (run(&st.kernel), run(&back));
        assert_eq!(a.len(), b.len());
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}: outputs differ",
            e.name
        );
    }
}

/// A small registry kernel as a JSON value to break.
fn doc() -> Value {
    let k = kittens_kernels::by_name("layernorm")
        .unwrap()
        .build_default()
        .unwrap();
    serde_json::from_str(&to_json(&k)).unwrap()
}

fn load(v: &Value) -> Result<Kernel, LoadError> {
    from_json(&serde_json::to_string(v).unwrap())
}

/// The first object under `v` that has key `key`, depth first.
fn find<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(key) {
                return m.get_mut(key);
            }
            m.values_mut().find_map(|x| find(x, key))
        }
        Value::Array(a) => a.iter_mut().find_map(|x| find(x, key)),
        _ => None,
    }
}

fn message(r: Result<Kernel, LoadError>) -> String {
    match r {
        Ok(k) => panic!("kernel `{}` was accepted", k.name),
        Err(e) => e.to_string(),
    }
}

#[test]
fn truncated_and_non_json_files_are_refused_with_the_position() {
    let text = to_json(&load(&doc()).unwrap());
    for cut in [0, 1, 17, text.len() / 2, text.len() - 1] {
        let e = from_json(&text[..cut]).unwrap_err();
        assert!(matches!(e, LoadError::Json { .. }), "{e}");
        assert!(e.to_string().contains("line"), "{e}");
    }
    assert!(matches!(
        from_json("[1, 2]").unwrap_err(),
        LoadError::Json { .. }
    ));
}

#[test]
fn format_and_version_are_checked() {
    let mut v = doc();
    v["version"] = 99.into();
    assert_eq!(load(&v).unwrap_err(), LoadError::Version { found: 99 });
    let mut v = doc();
    v["format"] = "torch".into();
    assert!(matches!(load(&v).unwrap_err(), LoadError::Format { .. }));
    let mut v = doc();
    v["extra"] = 1.into();
    assert!(message(load(&v)).contains("extra"));
}

#[test]
fn an_unknown_op_is_named() {
    let text = serde_json::to_string(&doc())
        .unwrap()
        .replacen("\"map\"", "\"silu\"", 1);
    let m = from_json(&text).unwrap_err().to_string();
    assert!(m.contains("silu") && m.contains("unknown variant"), "{m}");
}

#[test]
fn out_of_range_ids_are_refused_by_name() {
    // A register id past the declarations.
    let mut v = doc();
    let dst = find(&mut v, "map").unwrap();
    dst["dst"] = 999.into();
    let m = message(load(&v));
    assert!(m.contains("register id 999 is not declared"), "{m}");
    // A parameter id in an expression.
    let mut v = doc();
    *find(&mut v, "param").unwrap() = 42.into();
    let m = message(load(&v));
    assert!(m.contains("parameter id 42"), "{m}");
    // A grid coordinate the grid does not have.
    let mut v = doc();
    *find(&mut v, "block").unwrap() = 7.into();
    let m = message(load(&v));
    assert!(m.contains("grid coordinate 7"), "{m}");
}

#[test]
fn absurd_sizes_are_refused_with_the_limit() {
    // A register tile of 2^30 rows.
    let mut v = doc();
    let regs = v["kernel"]["regs"].as_array_mut().unwrap();
    let t = regs
        .iter_mut()
        .find_map(|r| r["kind"].get_mut("tile"))
        .unwrap();
    t["rows"] = (1u64 << 30).into();
    let m = message(load(&v));
    assert!(m.contains("budget of 1048576 bytes"), "{m}");
    // Zero waves, a huge block.
    let mut v = doc();
    v["kernel"]["waves"] = 4096.into();
    assert!(message(load(&v)).contains("4096 waves"));
    // A swizzle whose shifts overflow 32 bits.
    let k = kittens_kernels::by_name("gemm_bf16")
        .unwrap()
        .build_default()
        .unwrap();
    let mut v: Value = serde_json::from_str(&to_json(&k)).unwrap();
    v["kernel"]["shared"][0]["tile"]["swizzle"] =
        serde_json::json!({"kind": "xor", "bits": 40, "base": 3, "shift": 4});
    assert!(message(load(&v)).contains("swizzle"));
    // A size that is not a u32.
    let mut v = doc();
    v["kernel"]["waves"] = (-1).into();
    assert!(matches!(load(&v).unwrap_err(), LoadError::Json { .. }));
}

#[test]
fn names_must_be_identifiers() {
    let mut v = doc();
    v["kernel"]["globals"][0]["name"] = "x; system(\"rm\")".into();
    let m = message(load(&v));
    assert!(m.contains("must be an identifier"), "{m}");
    let mut v = doc();
    v["kernel"]["name"] = "".into();
    assert!(message(load(&v)).contains("identifier"));
}

#[test]
fn non_finite_constants_round_trip() {
    let k = kittens_kernels::by_name("attn_fwd")
        .unwrap()
        .build_default()
        .unwrap();
    let text = to_json(&k);
    assert!(text.contains("\"-inf\""), "attention fills -inf");
    assert_eq!(from_json(&text).unwrap(), k);
}

/// A program with a type error (an mma accumulating into bf16) is refused by the IR's validation with
/// the op's index.
#[test]
fn invalid_programs_name_the_op() {
    let k = kittens_kernels::by_name("gemm_bf16")
        .unwrap()
        .build_default()
        .unwrap();
    let mut v: Value = serde_json::from_str(&to_json(&k)).unwrap();
    let t = v["kernel"]["regs"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find_map(|r| r["kind"].get_mut("tile").filter(|t| t["dtype"] == "f32"))
        .unwrap();
    t["dtype"] = "bf16".into();
    let m = message(load(&v));
    assert!(m.contains("op #"), "{m}");
}
