//! The norm backwards built for 32-bit offsets (`kittens_ir::Grid::index32`, which
//! `RowLoop::index32_for` sets where a problem's rows fit): on sm_90a through NVRTC each launch
//! compiles with zero spills (the registers of each form go to stderr: `--nocapture`; with
//! `KITTENS_NORM_TABLE=1` every setting's 64-bit form too, the table `RowLoop::pair_where_it_fits`
//! was read from), and the launcher refuses a tensor past `kittens_ir::INDEX32_MAX_SPAN` elements by
//! name.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cases_support/parallel.rs"]
mod parallel;

use kittens_hw::Target;
use kittens_ir::{Env, Kernel, INDEX32_MAX_SPAN};
use kittens_kernels::rows::RowLoop;
use kittens_kernels::{layernorm, rmsnorm};
use kittens_runtime::cuda::launch::{check_args, TensorArg};

const DIMS: [u32; 4] = [768, 3080, 4096, 8192];
const ROWS: usize = 16384;

/// The row loop of blocks of `waves` waves for 16384 rows of `dim`, with 32-bit offsets or not.
fn row_loop(waves: u32, dim: u32, index32: bool) -> RowLoop {
    let lp = RowLoop::for_target(Target::Sm90a, waves).index32_for(ROWS, dim as usize);
    assert!(lp.index32, "16384 × {dim} fits 32-bit offsets");
    RowLoop { index32, ..lp }
}

/// `lp` with `resident` blocks per SM asked for, prefetch level `prefetch` (`None`: the default)
/// and the partial sums in shared memory or not (`RowLoop::shared_acc`).
fn knobs(lp: RowLoop, (resident, prefetch, shared_acc): Knob) -> RowLoop {
    RowLoop {
        resident,
        prefetch: prefetch.unwrap_or(lp.prefetch),
        shared_acc,
        ..lp
    }
}

/// Blocks per SM asked for, the prefetch level (`None`: the default), partial sums in shared memory.
type Knob = (u32, Option<u32>, bool);

/// `(label, kernel)` for each launch of the layernorm and rmsnorm backwards at `dim`.
fn kernels(dim: u32, index32: bool, kn: Knob) -> Vec<(String, Kernel)> {
    let gpu = Target::Sm90a.gpu().unwrap();
    let mut v = Vec::new();
    for p in [0.0, 0.1] {
        if p > 0.0 && dim > layernorm::bwd::MAX_DIM_32_LANES_DROPOUT {
            continue;
        }
        let cfg = layernorm::LayerNormConfig::for_gpu(gpu, dim, p);
        let lp = knobs(row_loop(cfg.waves, dim, index32), kn);
        let k = layernorm::bwd::build_bwd(&cfg, &lp).unwrap();
        v.push((format!("layernorm_bwd D{dim} p={p}"), k));
        if p == 0.0 {
            let k = layernorm::bwd::build_dweight(&cfg, &lp).unwrap();
            v.push((format!("layernorm_bwd D{dim} dweight"), k));
        }
    }
    let cfg = rmsnorm::RmsNormConfig::for_gpu(gpu, dim, true);
    let lp = knobs(row_loop(cfg.waves, dim, index32), kn);
    v.push((
        format!("rmsnorm_bwd D{dim}"),
        rmsnorm::build_bwd(&cfg, &lp).unwrap(),
    ));
    let k = rmsnorm::build_dweight(&cfg, &lp).unwrap();
    v.push((format!("rmsnorm_bwd D{dim} dweight"), k));
    v
}

/// NVRTC's register and spill report of `k` on sm_90a.
fn report(k: &Kernel) -> (u32, u32) {
    let l = kittens_codegen::lower(k, Target::Sm90a).unwrap();
    let image =
        kittens_runtime::cuda::compile(&l.source, &l.entry, "sm_90a", l.dynamic_shared_bytes())
            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
    (image.report.registers, image.report.spill_stores)
}

/// The settings measured: the default (one block per SM asked for), then two blocks per SM with
/// prefetch level 0 and at the default level; then the partial sums in shared memory at one block
/// per SM and at two with prefetch levels 0 and 1.
const KNOBS: [Knob; 6] = [
    (1, None, false),
    (2, Some(0), false),
    (2, None, false),
    (1, None, true),
    (2, Some(0), true),
    (2, Some(1), true),
];

/// Asks for the whole register table: every setting's 64-bit form compiled beside its 32-bit one (a
/// measurement; the check itself compiles the 64-bit form at the default setting only).
const TABLE_VAR: &str = "KITTENS_NORM_TABLE";

#[test]
fn index32_backwards_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    let table = std::env::var_os(TABLE_VAR).is_some();
    let mut cases = Vec::new();
    for kn in KNOBS {
        for dim in DIMS {
            for ((label, k64), (_, k32)) in kernels(dim, false, kn)
                .into_iter()
                .zip(kernels(dim, true, kn))
            {
                let l = kittens_codegen::lower(&k32, Target::Sm90a).unwrap();
                assert!(l.source.contains("typedef int kt_idx;"), "{label}");
                let k64 = (table || kn == KNOBS[0]).then_some(k64);
                cases.push((label, kn, k64, k32));
            }
        }
    }
    parallel::each(cases, |(label, kn, k64, k32)| {
        let (r32, s32) = report(&k32);
        let r64 = k64.map(|k| report(&k));
        eprintln!(
            "{label} resident={} prefetch={:?} shared_acc={}: registers 64-bit {r64:?} \
             (registers, spill stores), 32-bit {r32} ({s32})",
            kn.0, kn.1, kn.2
        );
        if kn == KNOBS[0] || kn == KNOBS[3] {
            assert_eq!(s32, 0, "{label}: 32-bit spills");
        }
    });
}

/// Every sum of a row at one barrier (`RowLoop::one_sum`), 32-bit offsets, at one block per SM with
/// the default prefetch and at two without: zero spills at one block per SM; the registers go to stderr
/// (`--nocapture`: what `RowLoop::pair_where_it_fits` compares).
#[test]
fn one_sum_backwards_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    let mut cases = Vec::new();
    for kn in [(1, None, false), (2, Some(0), false)] {
        for dim in DIMS {
            for (label, k) in kernels(dim, true, kn) {
                if label.ends_with("dweight") {
                    continue;
                }
                cases.push((one_sum(&k, dim, kn, &label), label, kn));
            }
        }
    }
    parallel::each(cases, |(k, label, kn)| {
        let (r, s) = report(&k);
        eprintln!(
            "{label} one_sum resident={} prefetch={:?}: registers {r} (spill stores {s})",
            kn.0, kn.1
        );
        if kn.0 == 1 {
            assert_eq!(s, 0, "{label}: one_sum spills");
        }
    });
}

/// The next rows' inputs staged in shared memory (`RowLoop::stage`, 16-byte `cp.async`), 32-bit
/// offsets, one barrier a row, at one block per SM (depths 1 to 3) and two (depth 1): each first
/// launch lowers to `cp.async` with its commit groups and waits, and compiles with zero spills at one
/// block per SM; registers, spills and the ring's shared bytes go to stderr (`--nocapture`).
#[test]
fn staged_backwards_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    let gpu = Target::Sm90a.gpu().unwrap();
    let mut cases = Vec::new();
    for dim in DIMS {
        for (resident, stage) in [(1, 1), (1, 2), (1, 3), (2, 1)] {
            let lp = |waves| RowLoop {
                one_sum: true,
                stage,
                resident,
                blocks: row_loop(waves, dim, true).blocks * resident,
                ..row_loop(waves, dim, true)
            };
            let cfg = rmsnorm::RmsNormConfig::for_gpu(gpu, dim, true);
            cases.push((
                rmsnorm::build_bwd(&cfg, &lp(cfg.waves)).unwrap(),
                stage,
                resident,
            ));
            let cfg = layernorm::LayerNormConfig::for_gpu(gpu, dim, 0.0);
            let ln = layernorm::bwd::build_bwd(&cfg, &lp(cfg.waves)).unwrap();
            cases.push((ln, stage, resident));
        }
    }
    parallel::each(cases, |(k, stage, resident)| {
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap();
        for needle in [
            "ks::cp_async_16(",
            "ks::cp_async_commit();",
            "ks::cp_async_wait<",
        ] {
            assert!(
                l.source.contains(needle),
                "{} stage {stage}: no {needle}",
                k.name
            );
        }
        // Two blocks per SM cap a thread at 64 registers, which the one-barrier forms overrun from
        // D 4096 (as without staging): nothing is asserted of their registers, so they are lowered
        // (the copies checked above) but not compiled: a compile that asserts nothing.
        if resident == 1 {
            let (r, spills) = report(&k);
            eprintln!(
                "{} stage={stage}: registers {r} (spill stores {spills}), shared {} bytes ({:?})",
                k.name, l.shared_bytes, l.shared_alloc
            );
            assert_eq!(spills, 0, "{} stage {stage}: spills", k.name);
        }
    });
}

/// The first launch of `label` (a kernel of [`kernels`]) rebuilt with [`RowLoop::one_sum`].
fn one_sum(k: &Kernel, dim: u32, kn: Knob, label: &str) -> Kernel {
    let gpu = Target::Sm90a.gpu().unwrap();
    let lp = |waves| RowLoop {
        one_sum: true,
        ..knobs(row_loop(waves, dim, true), kn)
    };
    if label.starts_with("rmsnorm") {
        let cfg = rmsnorm::RmsNormConfig::for_gpu(gpu, dim, true);
        return rmsnorm::build_bwd(&cfg, &lp(cfg.waves)).unwrap();
    }
    let p = if label.ends_with("p=0.1") { 0.1 } else { 0.0 };
    let cfg = layernorm::LayerNormConfig::for_gpu(gpu, dim, p);
    let built = layernorm::bwd::build_bwd(&cfg, &lp(cfg.waves)).unwrap();
    assert_eq!(built.name, k.name);
    built
}

#[test]
fn rows_past_the_32_bit_span_keep_64_bit_offsets() {
    let lp = RowLoop::for_target(Target::Sm90a, 16);
    let fits = (INDEX32_MAX_SPAN / 4096) as usize;
    assert!(lp.index32_for(fits, 4096).index32);
    assert!(!lp.index32_for(fits + 1, 4096).index32);
    assert!(!lp.index32_for(usize::MAX, 4096).index32);
}

/// A tensor's name, shape and strides (elements).
type Layout = (String, Vec<u64>, Vec<u64>);

#[test]
fn the_launcher_refuses_a_tensor_past_the_32_bit_span_by_name() {
    let gpu = Target::Sm90a.gpu().unwrap();
    let cfg = rmsnorm::RmsNormConfig::for_gpu(gpu, 4096, true);
    let k = rmsnorm::build_bwd(&cfg, &row_loop(cfg.waves, 4096, true)).unwrap();
    // The declared layouts at `rows`, as the caller would pass them.
    let args_at = |rows: i64| -> (Vec<(&str, i64)>, Vec<Layout>) {
        let params: Vec<(&str, i64)> = k
            .params
            .iter()
            .map(|p| (p.name.as_str(), if p.name == "rows" { rows } else { 0 }))
            .collect();
        let values: Vec<i64> = params.iter().map(|p| p.1).collect();
        let env = Env {
            params: &values,
            vars: &[],
            block: &[],
            wave: 0,
        };
        let ev = |es: &[kittens_ir::Expr]| -> Vec<u64> {
            es.iter().map(|e| e.eval(&env).unwrap() as u64).collect()
        };
        let ts = k
            .globals
            .iter()
            .map(|g| (g.name.clone(), ev(&g.dims), ev(&g.strides)))
            .collect();
        (params, ts)
    };
    let check = |rows: i64| {
        let (params, ts) = args_at(rows);
        let args: Vec<TensorArg> = ts
            .iter()
            .zip(&k.globals)
            .map(|((n, s, st), g)| TensorArg {
                name: n,
                ptr: 1 << 20,
                shape: s,
                strides: st,
                dtype: g.dtype,
            })
            .collect();
        check_args(&k, &params, &args).map(|_| ())
    };
    let fits = (INDEX32_MAX_SPAN / 4096) as i64;
    check(fits).unwrap();
    let err = check(fits + 1).unwrap_err().to_string();
    assert!(err.contains("1073745920 elements"), "{err}");
    assert!(err.contains("32-bit"), "{err}");
}

/// The backwards' first launch as the registry builds it for 16384 rows (`bwd_config`: 32-bit offsets,
/// two blocks per SM where `RowLoop::pair_where_it_fits` finds the registers): zero spills on sm_90a,
/// and the pair taken where the report says it fits and it measured faster (1024 ≤ D ≤ 3080 for
/// layernorm, D ≤ 3080 for rmsnorm); every sum of a row at one barrier from D = 4096 (layernorm) and
/// at every width (rmsnorm).
#[test]
fn the_default_backwards_compile_without_spills() {
    cuda_common::ensure_nvrtc();
    if std::env::var_os(kittens_kernels::rows::ROW_LOOP_VAR).is_some() {
        return; // a measurement's own setting: not the defaults
    }
    let mut compiled = Vec::new();
    for dim in DIMS {
        let cases: [(&str, &str, f32); 3] = [
            ("layernorm_bwd", "p", 0.0),
            ("layernorm_bwd", "p", 0.1),
            ("rmsnorm_bwd", "p", 0.0),
        ];
        for (name, key, p) in cases {
            if p > 0.0 && dim > layernorm::bwd::MAX_DIM_32_LANES_DROPOUT {
                continue;
            }
            let a = kittens_kernels::problem::NamedArgs::new()
                .with("rows", ROWS)
                .with("norm_dim", dim as usize)
                .with(key, p);
            let e = kittens_kernels::by_name(name).unwrap();
            let k = e.problem(&a).unwrap().build(Target::Sm90a).unwrap();
            assert!(k.grid.index32, "{name} D{dim}");
            let lp = if name == "rmsnorm_bwd" {
                let p = rmsnorm::problem::RmsNormProblem {
                    rows: ROWS,
                    dim: dim as usize,
                    ..Default::default()
                };
                rmsnorm::problem::bwd_config(&p, Target::Sm90a).unwrap().1
            } else {
                let mut prob = layernorm::problem::LayerNormProblem::default();
                (prob.norm.rows, prob.norm.dim, prob.norm.p) = (ROWS, dim as usize, p);
                layernorm::problem::bwd_config(&prob, Target::Sm90a)
                    .unwrap()
                    .1
            };
            assert_eq!(
                lp.one_sum,
                name == "rmsnorm_bwd" || dim >= 4096,
                "{name} D{dim}"
            );
            // The next two rows staged by cp.async from D 4096 (both backwards).
            assert_eq!(lp.stage, if dim >= 4096 { 2 } else { 0 }, "{name} D{dim}");
            let paired = if name == "rmsnorm_bwd" {
                dim <= 3080
            } else {
                (1024..=3080).contains(&dim)
            };
            assert_eq!(
                k.grid.resident,
                if paired { 2 } else { 1 },
                "{name} D{dim} p={p}"
            );
            compiled.push((format!("default {name} D{dim} p={p}"), k));
        }
    }
    parallel::each(compiled, |(what, k)| {
        let (regs, spills) = report(&k);
        eprintln!(
            "{what}: resident {} index32 {} registers {regs} spill stores {spills}",
            k.grid.resident, k.grid.index32
        );
        assert_eq!(spills, 0, "{what}");
    });
}
