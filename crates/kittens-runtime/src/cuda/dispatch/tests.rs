use super::*;
use kittens_kernels::layernorm::{build, LayerNormConfig};

fn layernorm(dim: u32, p: f32, eps: f32) -> Kernel {
    let gpu = Target::Sm90a.gpu().expect("sm_90a has a GPU");
    build(&LayerNormConfig {
        eps,
        ..LayerNormConfig::for_gpu(gpu, dim, p)
    })
    .expect("a valid configuration")
}

/// The dispatch cache's key is the tile program itself: one configuration at any size is one key (the
/// sizes are launch parameters), and every setting that changes the program changes the key.
#[test]
fn one_key_per_program_reused_across_sizes() {
    let a = layernorm(2048, 0.1, 1e-5);
    let b = layernorm(2048, 0.1, 1e-5);
    assert_eq!(ir_key(&a), ir_key(&b));
    let others = [
        layernorm(1024, 0.1, 1e-5),
        layernorm(2048, 0.0, 1e-5),
        layernorm(2048, 0.1, 1e-6),
    ];
    let mut keys: Vec<String> = others.iter().map(ir_key).collect();
    keys.push(ir_key(&a));
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "distinct programs share a key: {keys:?}");
}

#[test]
fn parameters_are_ordered_by_declaration_and_checked_by_name() {
    let k = layernorm(1024, 0.1, 1e-5);
    let names: Vec<String> = k.params.iter().map(|p| p.name.clone()).collect();
    let given: Vec<(String, i64)> = names
        .iter()
        .rev()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as i64 + 10))
        .collect();
    let ordered = ordered_params(&k, &given).unwrap();
    for (name, v) in names.iter().zip(&ordered) {
        assert_eq!(given.iter().find(|(n, _)| n == name).unwrap().1, *v);
    }
    let e = ordered_params(&k, &given[1..]).unwrap_err().to_string();
    assert!(e.contains(&given[0].0) && e.contains("missing"), "{e}");
    let mut extra = given.clone();
    extra.push(("bogus".into(), 1));
    let e = ordered_params(&k, &extra).unwrap_err().to_string();
    assert!(
        e.contains("bogus") && e.contains("no such parameter"),
        "{e}"
    );
}

/// A scratch tensor's layout is the one its launch declares at the call's parameters.
#[test]
fn scratch_layout_is_the_declared_one() {
    let k = layernorm(1024, 0.1, 1e-5);
    let params: Vec<i64> = k.params.iter().map(|_| 37).collect();
    let (shape, strides) = declared(&k, "x", &params).unwrap();
    assert_eq!(shape.len(), strides.len());
    assert!(shape.contains(&1024), "{shape:?}");
    let e = declared(&k, "nope", &params).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
}

/// Without a driver (CI) preparing is an error naming why, never a crash; with no launch at all it is
/// refused before the driver.
#[test]
fn preparing_fails_cleanly() {
    let e = Prepared::new(0, &[], vec![], &[])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no launches"), "{e}");
    let k = layernorm(1024, 0.0, 1e-5);
    let stage = StageSpec {
        params: k.params.iter().map(|p| (p.name.clone(), 3)).collect(),
        kernel: k,
    };
    let twice = vec![
        TensorSpec {
            name: "x".into(),
            shape: vec![3, 1024],
            strides: vec![1024, 1],
            dtype: DType::Bf16,
        };
        2
    ];
    let e = Prepared::new(0, std::slice::from_ref(&stage), twice, &[])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("`x` given twice"), "{e}");
}

/// A parameter that a layout or the grid reads cannot vary per launch; a seed can.
#[test]
fn free_parameters_must_not_shape_anything() {
    let k = layernorm(1024, 0.1, 1e-5);
    let stage = StageSpec {
        params: k.params.iter().map(|p| (p.name.clone(), 3)).collect(),
        kernel: k,
    };
    let stages = std::slice::from_ref(&stage);
    check_free(stages, &["seed_lo", "seed_hi", "offset_lo", "offset_hi"]).unwrap();
    let e = check_free(stages, &["rows"]).unwrap_err().to_string();
    assert!(e.contains("rows") && e.contains("cannot vary"), "{e}");
    let e = check_free(stages, &["nope"]).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
}
