use super::bind::{essential, offsets_set};
use super::*;
use crate::cuda::args::map_geometry;
use crate::cuda::limits::check_tensor_map_nd;
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

/// A broadcast view (stride 0) and a dimension of one element address nothing of their own: two
/// launches' views of one tensor match when the rest agrees, and a different layout does not.
#[test]
fn views_match_without_broadcast_and_unit_dimensions() {
    // The attention backward's lse: [b, h, s, d] with stride 0 over d, and [b, h, 16, s].
    let a = essential(&[2, 3, 77, 128], &[231, 77, 1, 0]);
    let b = essential(&[2, 3, 16, 77], &[231, 77, 0, 1]);
    let caller = essential(&[2, 3, 77], &[231, 77, 1]);
    assert_eq!(a, b);
    assert_eq!(a, caller);
    assert_eq!(essential(&[1, 5], &[999, 1]), essential(&[5], &[1]));
    assert_ne!(
        essential(&[2, 3, 77], &[231, 1, 3]),
        essential(&[2, 3, 77], &[231, 77, 1])
    );
}

/// A tensor the call's launches do not take is refused by name before anything is lowered.
#[test]
fn unknown_caller_tensors_are_refused() {
    let k = layernorm(1024, 0.0, 1e-5);
    let stage = StageSpec {
        params: k.params.iter().map(|p| (p.name.clone(), 3)).collect(),
        kernel: k,
    };
    let stray = vec![TensorSpec {
        name: "weights".into(),
        shape: vec![1024],
        strides: vec![1],
        dtype: DType::Bf16,
    }];
    let e = Prepared::new(0, std::slice::from_ref(&stage), stray, &[])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("`weights`") && e.contains("no launch"), "{e}");
}

/// The varlen backward's three sm_90a launches (`attn_varlen_bwd`: the dense strip pass for D and
/// the zeroed dQ accumulator over the packed rows, the varlen key blocks, the dQ conversion) agree on
/// every tensor two of them declare — in order, as [`bind`] checks a caller's tensor — so one
/// caller's `do` (and one scratch `delta`, `dq_acc`) serves all three; and each tensor map of the
/// key blocks passes the driver's limits at the call's parameters (checked here without a GPU).
#[test]
fn varlen_backward_launches_share_their_tensors() {
    use kittens_kernels::problem::NamedArgs;
    let entry = kittens_kernels::registry::by_name("attn_varlen_bwd").unwrap();
    for (dim, causal) in [(64usize, true), (128, false)] {
        let a = NamedArgs::new()
            .with("batch", 5usize)
            .with("heads", 4usize)
            .with("heads_kv", 2usize)
            .with("seq", 300usize)
            .with("seq_kv", 200usize)
            .with("dim", dim)
            .with("causal", causal);
        let p = entry.problem(&a).unwrap();
        let st = registry_stages(entry, p.as_ref()).unwrap();
        assert_eq!(st.len(), 3);
        let layouts = |s: &StageSpec| -> Vec<(String, Vec<(u64, u64)>)> {
            let ordered = ordered_params(&s.kernel, &s.params).unwrap();
            (s.kernel.globals.iter())
                .map(|g| {
                    let (shape, strides) = declared(&s.kernel, &g.name, &ordered).unwrap();
                    (g.name.clone(), essential(&shape, &strides))
                })
                .collect()
        };
        let all: Vec<_> = st.iter().map(layouts).collect();
        let mut shared = 0;
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                for (name, la) in a {
                    if let Some((_, lb)) = b.iter().find(|(n, _)| n == name) {
                        assert_eq!(la, lb, "D{dim}: `{name}` declared differently");
                        shared += 1;
                    }
                }
            }
        }
        // do, delta and dq_acc (pre and key blocks), dq_acc (key blocks and conversion), and
        // dq_acc (pre and conversion).
        assert_eq!(shared, 5, "D{dim}: {all:?}");
        let kv = &st[1];
        let l = kittens_codegen::lower(&kv.kernel, Target::Sm90a).unwrap();
        let values: Vec<(&str, i64)> = kv.params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let ordered = ordered_params(&kv.kernel, &kv.params).unwrap();
        let maps = l.tma_maps();
        assert!(!maps.is_empty(), "the key blocks' rings are filled by TMA");
        for t in maps {
            let g = map_geometry(&l, &t, &values).unwrap();
            let (shape, strides) = declared(&kv.kernel, &g.tensor, &ordered).unwrap();
            let elem = g.dtype.bytes() as u64;
            let span = shape
                .iter()
                .zip(&strides)
                .map(|(&n, &s)| n.saturating_sub(1) * s)
                .sum::<u64>()
                + 1;
            check_tensor_map_nd(&g.dims, &g.strides, &g.boxes, elem, (span * elem) as usize)
                .unwrap_or_else(|e| panic!("D{dim}: map of `{}`: {e} ({g:?})", g.tensor));
        }
    }
}

/// Scratch declared in different orders or splits of its dimensions is one tensor when it covers the
/// same offsets: the packed decode's `[G, b, hk, g, d]` partials are its merge's `[G, b, h, 1, d]`,
/// `[part, col]` is `[col, part]` transposed; another set of offsets (rows with a gap) is not.
#[test]
fn scratch_offsets_match_across_orders_and_splits() {
    let dense = |shape: &[u64]| -> Vec<u64> {
        let mut s = vec![1u64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * shape[i + 1];
        }
        s
    };
    let packed = [3u64, 2, 8, 4, 128];
    let merge = [3u64, 2, 32, 1, 128];
    assert_eq!(
        offsets_set(&packed, &dense(&packed)),
        offsets_set(&merge, &dense(&merge))
    );
    assert_eq!(offsets_set(&[5, 7], &[7, 1]), offsets_set(&[7, 5], &[1, 7]));
    // The same extents with another stride (a gap between rows) differ.
    assert_ne!(offsets_set(&[5, 7], &[8, 1]), offsets_set(&[5, 7], &[7, 1]));
    // The partials of 4 parts against those of 2 parts with twice the rows: the same count of
    // elements, the same offsets (a dense run), so a layout check is by offsets, not by shape.
    assert_eq!(
        offsets_set(&[4, 16], &[16, 1]),
        offsets_set(&[2, 32], &[32, 1])
    );
}

/// The GQA-packed paged decode with a key split: the split kernel writes the partials as
/// `[G, b, heads_kv, group, ..]`, the merge reads them as `[G, b, heads, 1, ..]`; the same offsets.
#[test]
fn packed_paged_decode_shares_its_partials_with_the_merge() {
    use kittens_kernels::problem::NamedArgs;
    let entry = kittens_kernels::registry::by_name("attn_paged").unwrap();
    let a = NamedArgs::new()
        .with("batch", 3usize)
        .with("heads", 32usize)
        .with("heads_kv", 8usize)
        .with("seq", 1usize)
        .with("dim", 128usize)
        .with("page_size", 256usize)
        .with("max_blocks", 4usize)
        .with("num_splits", 4usize);
    let p = entry.problem(&a).unwrap();
    let st = registry_stages(entry, p.as_ref()).unwrap();
    assert_eq!(st.len(), 2);
    assert!(
        st[0].kernel.name.contains("packgqa"),
        "{}",
        st[0].kernel.name
    );
    for name in ["o_partial", "lse_partial"] {
        let [a, b] = [&st[0], &st[1]].map(|s| {
            let ordered = ordered_params(&s.kernel, &s.params).unwrap();
            let (shape, strides) = declared(&s.kernel, name, &ordered).unwrap();
            (essential(&shape, &strides), offsets_set(&shape, &strides))
        });
        assert_ne!(
            a.0, b.0,
            "`{name}`: declared the same way, not a test of the split"
        );
        assert_eq!(a.1, b.1, "`{name}`: different offsets");
    }
}
