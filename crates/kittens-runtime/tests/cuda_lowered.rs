//! The Hopper `gemm_bf16` tile program (kittens-kernels, producer/consumer schedule) lowered to CUDA
//! by `kittens_codegen::cuda::lower` compiles with NVRTC for sm_90a without spills, and the compiled
//! code (NVRTC's PTX) holds the Hopper machinery the schedule implies.

#[path = "cuda_support/common.rs"]
mod cuda_common;
#[path = "cuda_support/ptx.rs"]
mod ptx;

use cuda_common::{compile_clean, ensure_nvrtc, fresh_cache, test_cache};
use kittens_hw::Target;
use kittens_ir::SlotFill;
use kittens_kernels::gemm::shapes::{HopperTile, TILES};
use kittens_kernels::gemm::{build, BLayout, GemmConfig};
use kittens_runtime::cuda::compile_with_cache;
use ptx::Inst;

/// The instruction classes `ptx` must issue, each with what it is for.
fn assert_issues(ptx: &str, want: &[(&str, &str)], what: &str) {
    for (op, why) in want {
        assert!(ptx::count(ptx, op) > 0, "{what}: no `{op}` ({why})");
    }
}

#[test]
fn lowered_gemm_compiles_for_sm_90a() {
    ensure_nvrtc();
    // As `kittens compile gemm_bf16 --target sm_90a` gets it: from the registry, built for the
    // target, lowered.
    let k = kittens_kernels::by_name("gemm_bf16")
        .and_then(|e| e.build_for(Target::Sm90a))
        .unwrap_or_else(|e| panic!("{e}"));
    let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
    if let Ok(dir) = std::env::var("KITTENS_DUMP") {
        std::fs::write(format!("{dir}/{}.cu", l.entry), &l.source).expect("dump");
    }
    // One TMA map per loaded tensor (A and B) and one for the TMA-store epilogue (C); one thread per
    // lane of every wave of the schedule.
    assert_eq!(l.tma_maps().len(), 3, "{:?}", l.tma_maps());
    assert_eq!(l.threads, 32 * l.ir.waves);
    let code = ptx::of(&l);
    assert_issues(
        &code,
        &[
            (
                "setmaxnreg.dec.sync.aligned.u32",
                "the producer's registers",
            ),
            (
                "setmaxnreg.inc.sync.aligned.u32",
                "the consumers' registers",
            ),
            (
                "cp.async.bulk.tensor.2d.shared::cluster.global",
                "TMA loads",
            ),
            ("wgmma.mma_async", "wgmma"),
            (
                "cp.async.bulk.tensor.2d.global.shared::cta",
                "C's TMA store",
            ),
        ],
        &l.entry,
    );
    assert!(
        ptx::stream(&code).contains(&Inst::Wait(1)),
        "a chain kept in flight"
    );
    // Kept as text: which barrier a wait is on is a runtime address in the PTX too.
    assert!(l.source.contains("kt::mbarrier_wait(KT_EMPTY(slot)"));
    // A fresh cache: the figures come from this compile, not from a cubin left by an earlier build.
    let cache = fresh_cache("lowered-gemm");
    let image = compile_with_cache(
        &l.source,
        &l.entry,
        "sm_90a",
        l.dynamic_shared_bytes(),
        Some(&cache),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!image.report.cached);
    let r = &image.report;
    eprintln!("{}: {r:?}", l.entry);
    assert_eq!(
        (r.spill_stores, r.spill_loads, r.stack_frame),
        (0, 0, 0),
        "{r:?}"
    );
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    assert!(r.dynamic_shared_bytes <= h100.shared_bytes_per_block);
    assert!(
        r.warnings
            .iter()
            .all(|w| !w.contains("C7508") && !w.contains("serialized")),
        "setmaxnreg ignored or wgmma serialized: {:?}",
        r.warnings
    );
    // The second compile of the same source comes from the on-disk cache with the same figures.
    let again = compile_with_cache(
        &l.source,
        &l.entry,
        "sm_90a",
        l.dynamic_shared_bytes(),
        Some(&cache),
    )
    .expect("cached");
    assert!(again.report.cached);
    assert_eq!(
        (again.report.registers, again.cubin.len()),
        (r.registers, image.cubin.len())
    );
}

/// The Hopper attention program (kittens-kernels `attn_fwd`, producer/consumer) lowered for sm_90a
/// compiles with NVRTC without spills, for both head dimensions, causal or not, and holds the
/// machinery its schedule implies: 4-d TMA loads (BSHD/BHSD strides), `wgmma` from shared memory for
/// Q·Kᵀ and with A from registers and B N-major for P·V, register reallocation.
#[test]
fn lowered_attention_compiles_for_sm_90a() {
    ensure_nvrtc();
    let entry = kittens_kernels::by_name("attn_fwd").unwrap_or_else(|e| panic!("{e}"));
    let registry = entry
        .build_for(Target::Sm90a)
        .unwrap_or_else(|e| panic!("{e}"));
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    use kittens_kernels::attn_fwd::{build, AttnConfig};
    let mut kernels = vec![registry];
    let reg = AttnConfig::for_gpu(h100);
    let (mut turns, mut dims, mut overlaps) = (vec![reg.pingpong], vec![128], vec![reg.overlap]);
    // With and without the consumer warpgroups' turns (named barriers), and every configuration
    // the benchmark times (both head dimensions, causal or not, no turns).
    // The last two also write the log-sum-exp, the causal one with the mask aligned bottom-right.
    // Each configuration also with Q double-buffered across a block's tiles.
    let mut lses = vec![false];
    let mut qd = vec![reg.q_double];
    let mut causals = vec![reg.causal];
    for (dim, causal, pingpong, overlap, lse) in [
        (64, true, true, true, false),
        (128, true, true, true, false),
        (64, false, false, true, false),
        (128, true, false, true, false),
        (64, true, false, true, false),
        (128, false, true, false, false),
        (128, true, true, false, false),
        (128, true, true, true, true),
        (64, false, true, true, true),
    ] {
        kernels.push(
            build(&AttnConfig {
                dim,
                causal,
                pingpong,
                overlap,
                lse,
                q_double: true,
                ..AttnConfig::for_gpu(h100)
            })
            .unwrap_or_else(|e| panic!("{e}")),
        );
        turns.push(pingpong);
        dims.push(dim);
        overlaps.push(overlap);
        lses.push(lse);
        qd.push(true);
        causals.push(causal);
        turns.push(pingpong);
        dims.push(dim);
        overlaps.push(overlap);
        lses.push(lse);
        qd.push(false);
        causals.push(causal);
        let cfg = AttnConfig {
            dim,
            causal,
            pingpong,
            overlap,
            lse,
            bottom_right: lse && causal,
            q_double: false,
            ..AttnConfig::for_gpu(h100)
        };
        kernels.push(build(&cfg).unwrap_or_else(|e| panic!("{e}")));
    }
    let cache = test_cache("lowered-attn");
    for (i, k) in kernels.iter().enumerate() {
        let l = kittens_codegen::lower(k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        if let Ok(dir) = std::env::var("KITTENS_DUMP") {
            std::fs::write(format!("{dir}/{}_{i}.cu", l.entry), &l.source).expect("dump");
        }
        // Q, K, V each one 4-d map (one box shape per tensor), O stored directly.
        assert_eq!(l.tma_maps().len(), 3, "{:?}", l.tma_maps());
        let code = ptx::of(&l);
        assert_issues(
            &code,
            &[
                (
                    "cp.async.bulk.tensor.4d.shared::cluster.global",
                    "4-d TMA loads",
                ),
                ("wgmma.mma_async", "wgmma"),
                ("cvt.rn.bf16x2.f32", "P packed to bf16"),
                (
                    "setmaxnreg.dec.sync.aligned.u32 40",
                    "the producer's 40 registers",
                ),
                ("setmaxnreg.inc.sync.aligned.u32 232", "the consumers' 232"),
                ("shfl.sync.bfly.b32", "row reductions across the quad"),
            ],
            &l.entry,
        );
        // P·V: A (P) from registers, B (V) N-major: the register-A form with transpose-B set, at
        // head dimension 128 one N = 128 chain over both halves of V.
        let pv = |n: u32| {
            ptx::stream(&code).iter().any(|i| {
                matches!(i, Inst::Wgmma { shape, imm }
                    if *shape == format!("m64n{n}k16.f32.bf16.bf16") && *imm == [1, 1, 1])
            })
        };
        assert!(pv(dims[i] / 2) || pv(dims[i]), "{}: no P·V wgmma", l.entry);
        assert_eq!(
            pv(128),
            dims[i] == 128,
            "the P·V pair fuses exactly at head dimension 128"
        );
        // Kept as text: an empty asm (a compiler fence) leaves nothing in the PTX.
        assert!(l.source.contains("kt::reg_fence(r_s)"));
        let r = &compile_clean(&l, &cache, &l.entry);
        eprintln!("{} ({}): {r:?}", l.entry, k.shared_bytes());
        // K and V share a full/empty barrier pair per slot only when read in the same key step: in
        // the rotated loop V is read a step later (a shared barrier hung on the H100). Kept as text
        // (here and the tile loop and Q slot below): the slot each barrier guards is a runtime
        // address in the PTX, and only an sm_90a GPU runs them.
        let shared_kv = l.source.contains("k -> k_s0, v -> v_s0")
            || l.source
                .contains("k -> k_s0, k -> k_s1, v -> v_s0, v -> v_s1");
        assert_eq!(
            shared_kv, !overlaps[i],
            "K/V barrier sharing for dim {} overlap {}",
            dims[i], overlaps[i]
        );
        // Causal: query blocks paired long with short, two launch ids per block in turn.
        assert_eq!(k.grid.paired, causals[i], "paired grid in kernel {i}");
        assert_eq!(
            l.source
                .contains("2u * (blockIdx.x + (kt_round >> 1) * gridDim.x)"),
            causals[i],
            "paired tile loop in kernel {i}"
        );
        // Q double-buffered: alternate tiles of a block read alternate slots.
        assert_eq!(
            l.source.contains("(kt_round % 2)"),
            qd[i],
            "Q slot by the round in kernel {i}"
        );
        // The log-sum-exp: the kernel's only f32 store to global memory (O is bf16).
        assert_eq!(
            ptx::count(&code, "st.global.f32") > 0,
            lses[i],
            "log-sum-exp store in kernel {i}"
        );
        assert_eq!(
            ptx::count(&code, "bar.arrive") > 0,
            turns[i],
            "the warpgroup turns follow AttnConfig::pingpong (on in the registry's configuration)"
        );
    }
}

/// Every block shape of the shape-aware Hopper GEMM (`gemm::shapes::TILES`) is the one tile
/// program with other parameters, lowers for sm_90a and compiles with NVRTC without spills, within the
/// H100's shared memory; 64-row blocks run one consumer warpgroup (no register reallocation), 256-row
/// blocks issue two wgmma chains per K step.
#[test]
fn every_gemm_block_shape_compiles_for_sm_90a() {
    ensure_nvrtc();
    let cache = test_cache("gemm-shapes");
    for (tile, b_layout) in blocks_and_layouts() {
        let (cfg, l) = lowered_block(tile, b_layout, SlotFill::Tma);
        let kn = b_layout == BLayout::Kn;
        let maps = l.tma_maps();
        // B as K x N: 64-column boxes of K-step rows, one per column atom of the slot.
        let b_box = if kn { (64, 64) } else { (tile.cols, 64) };
        assert_eq!(
            (maps[0].box_rows, (maps[1].box_rows, maps[1].box_cols)),
            (tile.rows, b_box),
            "{tile}: {maps:?}"
        );
        let code = ptx::of(&l);
        // A stage is A's box and B's boxes (one, or one per 64 columns of B stored K × N).
        let b_loads = if kn { tile.cols as usize / 64 } else { 1 };
        assert_eq!(
            ptx::count(&code, "cp.async.bulk.tensor.2d.shared::cluster.global"),
            1 + b_loads,
            "{tile}"
        );
        assert_eq!(l.threads, 128 * (1 + tile.consumers()), "{tile}");
        assert_eq!(
            ptx::count(&code, "setmaxnreg.") > 0,
            tile.consumers() == 2,
            "{tile}"
        );
        // A consumer's K step: one commit group, a chain of m64n{cols}k16 wgmmas (B's transpose
        // immediate set for K × N), four per 64 rows the warpgroup owns.
        let step = ptx::step_loop(&code);
        let chains = step.iter().filter(|i| **i == Inst::Commit).count();
        assert_eq!(chains, 1, "{tile}: one commit group per K step");
        let want = Inst::Wgmma {
            shape: format!("m64n{}k16.f32.bf16.bf16", tile.cols),
            imm: vec![1, 1, 0, u32::from(kn)],
        };
        let wgmmas: Vec<&Inst> = step
            .iter()
            .filter(|i| matches!(i, Inst::Wgmma { .. }))
            .collect();
        assert!(wgmmas.iter().all(|i| **i == want), "{tile}: {wgmmas:?}");
        assert_eq!(
            wgmmas.len(),
            4 * (tile.rows as usize / (64 * tile.consumers() as usize)),
            "{tile}"
        );
        let r = compile_clean(&l, &cache, &format!("{tile} {b_layout:?}"));
        eprintln!(
            "{tile}: {} registers, {} B shared, stages {}",
            r.registers, r.dynamic_shared_bytes, cfg.stages
        );
    }
}

/// `gemm_fp8` from the registry (the `gemm_bf16` program with e4m3 operands and per-tensor scales),
/// lowered for sm_90a, compiles with NVRTC without spills; so does its per-row/column-scaled variant,
/// whose scales (two per thread for A's rows, 64 for C's columns) sit beside the 128 accumulators.
#[test]
fn lowered_fp8_gemm_compiles_for_sm_90a() {
    ensure_nvrtc();
    use kittens_kernels::gemm::{build, GemmConfig, Scales};
    let registry = kittens_kernels::by_name("gemm_fp8")
        .and_then(|e| e.build_for(Target::Sm90a))
        .unwrap_or_else(|e| panic!("{e}"));
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let mut rowcol = GemmConfig::fp8_for_gpu(h100);
    rowcol.types.scales = Some(Scales::PerRowCol);
    let rowcol = build(&rowcol).unwrap_or_else(|e| panic!("{e}"));
    let cache = test_cache("lowered-fp8");
    for k in [registry, rowcol] {
        let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{e}"));
        let code = ptx::of(&l);
        assert_issues(
            &code,
            &[("wgmma.mma_async.sync.aligned.m64n", "wgmma")],
            &l.entry,
        );
        assert!(
            ptx::stream(&code)
                .iter()
                .all(|i| !matches!(i, Inst::Wgmma { shape, .. }
                if !shape.ends_with("k32.f32.e4m3.e4m3"))),
            "{}: every wgmma takes e4m3",
            l.entry
        );
        let r = &compile_clean(&l, &cache, &l.entry);
        eprintln!("{}: {r:?}", l.entry);
    }
}

/// Every block shape of the Hopper GEMM with A and B filled by the producer warpgroup's `cp.async`
/// copies (`SlotFill::CpAsync`, for rows off 128-byte lines) instead of TMA, B stored either way:
/// it lowers for sm_90a and compiles with NVRTC without spills and without setmaxnreg ignored
/// (the producers' 40 registers hold the copy loop); the kernel takes only C's tensor map, every
/// producer thread copies, each slot's `full` barrier expects the 128 threads' arrivals.
#[test]
fn every_gemm_block_shape_compiles_with_cp_async_loads() {
    ensure_nvrtc();
    let cache = test_cache("gemm-cp-async");
    for (tile, b_layout) in blocks_and_layouts() {
        let (cfg, l) = lowered_block(tile, b_layout, SlotFill::CpAsync);
        let maps = l.tma_maps();
        assert_eq!(maps.len(), 1, "{tile}: only C's store map, {maps:?}");
        assert_eq!(l.ir.globals[maps[0].global as usize].name, "c", "{tile}");
        let src = &l.source;
        let code = ptx::of(&l);
        // No TMA load; every producer thread copies and arrives once per fill, no expected bytes.
        assert_eq!(
            ptx::count(&code, "cp.async.bulk.tensor.2d.shared::cluster.global"),
            0,
            "{tile}"
        );
        assert!(ptx::count(&code, "cp.async.cg.shared.global") > 0, "{tile}");
        assert_eq!(
            ptx::count(&code, "cp.async.mbarrier.arrive.noinc"),
            1,
            "{tile}"
        );
        assert_eq!(ptx::count(&code, "mbarrier.arrive.expect_tx"), 0, "{tile}");
        let stages = cfg.stages as usize;
        let inits = ptx::mbarrier_counts(&code, "mbarrier.init");
        assert!(
            inits.iter().filter(|&&n| n == 128).count() >= stages,
            "{tile}: full barriers expect the 128 producer threads: {inits:?}"
        );
        // Kept as text (one copy loop per operand, the thread-per-chunk index, the fence's place):
        // the unrolled copies and a fence that C's store also issues leave no count in the PTX.
        assert!(
            src.contains("const u32 kt_ptid = threadIdx.x % 128u;"),
            "{tile}"
        );
        assert_eq!(src.matches("kt::cp_async_16(").count(), 2, "{tile}");
        // The consumers fence the generic-proxy copies before their wgmmas read the slot.
        assert!(src.contains("kt::fence_proxy_async(); // cp.async filled the slot"));
        let r = compile_clean(&l, &cache, &format!("{tile} {b_layout:?} cp.async"));
        eprintln!(
            "{tile} {b_layout:?} cp.async: {} registers, {} B shared",
            r.registers, r.dynamic_shared_bytes
        );
    }
}

/// Every block shape in clusters of two and four row tiles (`GemmConfig::cluster`): B's boxes are
/// fetched a share by each block and multicast to all (a map of 1/c of the rows, each share at its
/// rank's rows and shared offset), A's as before; the frame synchronises the cluster after the barrier
/// setup, the producer's tail waits for every slot's release, lane r of each consumer warp releases
/// to block r, the tile loop walks groups of row tiles; it compiles without spills. Split-K with
/// clusters is refused.
#[test]
fn every_gemm_block_shape_compiles_in_clusters_of_two_and_four() {
    ensure_nvrtc();
    let cache = test_cache("gemm-clusters");
    for (tile, b_layout) in blocks_and_layouts() {
        for c in [2u32, 4] {
            let (_, l) = lowered_cluster(tile, b_layout, SlotFill::Tma, c);
            let what = format!("{tile} {b_layout:?} clusters of {c}");
            let kn = b_layout == BLayout::Kn;
            let maps = l.tma_maps();
            let b_box = if kn {
                (64 / c, 64)
            } else {
                (tile.cols / c, 64)
            };
            assert_eq!(
                (maps[0].box_rows, (maps[1].box_rows, maps[1].box_cols)),
                (tile.rows, b_box),
                "{what}: {maps:?}"
            );
            let src = &l.source;
            let code = ptx::of(&l);
            // B's boxes multicast to every block of the cluster (CTA mask of c bits), A's loaded
            // by each block alone.
            let boxes = if kn { tile.cols as usize / 64 } else { 1 };
            let load =
                "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes";
            let multicast = format!("{load}.multicast::cluster");
            let masks = ptx::constant_operands(&code, &multicast);
            assert_eq!(masks.len(), boxes, "{what}");
            let all = Some((1u64 << c) - 1);
            assert!(
                masks.iter().all(|m| m.last() == Some(&all)),
                "{what}: {masks:?}"
            );
            assert_eq!(ptx::count(&code, load) - boxes, 1, "{what}: A's load");
            // Kept as text (each block's share of B: its offset and coordinates by the cluster
            // rank), the producer's tail, the release to block r and the tile loop below: they
            // are runtime values and branches in the PTX, and only an sm_90a GPU runs them.
            let share = b_box.0 * 128;
            assert!(
                src.contains(&format!("kt_crank * {share}u, &tma1"))
                    && src.contains(&format!("(int)kt_crank * {}", b_box.0)),
                "{what}: share {share}"
            );
            // One cluster barrier after the setup; at the end the producer waits until every
            // block's consumers have released its slots (no barrier).
            assert_eq!(ptx::count(&code, "barrier.cluster.arrive"), 1, "{what}");
            assert_eq!(ptx::count(&code, "barrier.cluster.wait"), 1, "{what}");
            assert!(
                src.contains("if ((kt_filled >> i) & 1u) kt::mbarrier_wait(KT_EMPTY(i), ((kt_ppar >> i) & 1u) ^ 1u);"),
                "{what}"
            );
            assert!(src.contains(&format!(
                "if (kt::lane_id() < {c}u) kt::mbarrier_arrive_cluster(kt::map_shared_to_cta(KT_EMPTY(i), kt::lane_id()))"
            )));
            // Each `empty` barrier counts the consumer warps of every block of the cluster.
            let warps = 4 * tile.consumers() * c;
            let inits = ptx::mbarrier_counts(&code, "mbarrier.init");
            assert!(inits.contains(&(warps as u64)), "{what}: {inits:?}");
            assert!(
                src.contains(&format!("kt_tile = blockIdx.x / {c}u"))
                    && src.contains(&format!("blk0 = {c} * blk0 + (int)kt_crank;")),
                "{what}"
            );
            assert_eq!(l.cluster, c);
            // 3000 rows of C: 132 SMs hold 132 / c clusters.
            let blocks = l.blocks(&[("m", 3000), ("n", 3000), ("k", 3000)], 132);
            let groups = 3000u32.div_ceil(tile.rows).div_ceil(c) * 3000u32.div_ceil(tile.cols);
            assert_eq!(blocks, Some(c * groups.min(132 / c)), "{what}");
            compile_clean(&l, &cache, &what);
        }
    }
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let split = GemmConfig {
        split_k: 2,
        cluster: 2,
        ..TILES[0].config(h100)
    };
    let e = build(&split).expect_err("split-K in clusters").to_string();
    assert!(e.contains("clusters of 2 with split_k 2"), "{e}");
}

/// A ring deeper than fits beside the whole C slab: the lowering keeps as many 64 × 64 C boxes per
/// consumer warpgroup as fit beside it and stores box by box (each box waits until the one before it
/// in its buffer has left the slab); the kernel compiles clean within the H100's shared memory. A
/// ring that leaves no room for one box is refused with the limit named.
#[test]
fn deeper_rings_store_c_box_by_box() {
    ensure_nvrtc();
    let cache = test_cache("gemm-deep-ring");
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    // (block, stages, 4 KiB boxes of 32 columns per warpgroup beside the ring): 128×192 at five
    // 40 KiB stages keeps three of its six, 128×256 at four 48 KiB stages four of eight.
    let tile = |rows, cols| HopperTile { rows, cols };
    for (tile, stages, bufs) in [(tile(128, 192), 5, 3u32), (tile(128, 256), 4, 4)] {
        assert!(
            stages > tile.stages(h100),
            "{tile}: the default ring already holds {stages}"
        );
        for b_layout in [BLayout::Nk, BLayout::Kn] {
            let cfg = GemmConfig {
                b_layout,
                stages,
                ..tile.config(h100)
            };
            let k = build(&cfg).unwrap_or_else(|e| panic!("{tile}: {e}"));
            let l =
                kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{tile}: {e}"));
            if let Ok(dir) = std::env::var("KITTENS_DUMP") {
                let path = format!("{dir}/gemm_{tile}_{b_layout:?}_s{stages}.cu");
                std::fs::write(path, &l.source).expect("dump");
            }
            // Each box waits until all but the last `bufs - 1` stores have read their slab.
            let wait = format!("cp.async.bulk.wait_group.read {};", bufs - 1);
            assert!(ptx::count(&ptx::of(&l), &wait) > 0, "{tile}: no `{wait}`");
            // Kept as text: the box loop and its slab rotation are runtime addresses in the PTX.
            let boxes = tile.cols / 32;
            assert!(
                l.source
                    .contains(&format!("for (u32 j = 0; j < {boxes}u; ++j) {{"))
                    && l.source.contains(&format!("slab + (j % {bufs}u) * 4096u")),
                "{tile}: no box-by-box store"
            );
            assert!(
                l.source.contains(&format!(
                    "C staging, {} bytes per consumer warpgroup",
                    bufs * 4096
                )),
                "{tile}"
            );
            let r = compile_clean(&l, &cache, &format!("{tile} {b_layout:?} {stages} stages"));
            assert!(
                r.dynamic_shared_bytes > (stages * (tile.rows + tile.cols) * 128),
                "{r:?}"
            );
        }
    }
    // Seven 32 KiB stages of 128×128 leave under 2 KiB.
    let tile = HopperTile {
        rows: 128,
        cols: 128,
    };
    let k = build(&GemmConfig {
        stages: 7,
        ..tile.config(h100)
    })
    .expect("the IR's budget counts the ring alone");
    let e = kittens_codegen::lower(&k, Target::Sm90a)
        .map(|_| ())
        .expect_err("no room for C staging")
        .to_string();
    assert!(
        e.contains("bytes per block") && e.contains("C staging"),
        "{e}"
    );
}

/// Every Hopper GEMM block (`gemm::shapes::TILES`) with B as N × K and as K × N.
fn blocks_and_layouts() -> impl Iterator<Item = (HopperTile, BLayout)> {
    TILES
        .iter()
        .flat_map(|&t| [(t, BLayout::Nk), (t, BLayout::Kn)])
}

/// The GEMM of one block, B layout and slot fill, configured for the H100 and lowered for sm_90a
/// (written to `$KITTENS_DUMP` when set).
fn lowered_block(
    tile: HopperTile,
    b_layout: BLayout,
    loads: SlotFill,
) -> (GemmConfig, kittens_codegen::Lowered) {
    lowered_cluster(tile, b_layout, loads, 1)
}

/// [`lowered_block`] with row tiles in clusters of `cluster`.
fn lowered_cluster(
    tile: HopperTile,
    b_layout: BLayout,
    loads: SlotFill,
    cluster: u32,
) -> (GemmConfig, kittens_codegen::Lowered) {
    let h100 = kittens_hw::gpu("h100").expect("catalog");
    let cfg = GemmConfig {
        b_layout,
        loads,
        cluster,
        ..tile.config(h100)
    };
    let k = build(&cfg).unwrap_or_else(|e| panic!("{tile}: {e}"));
    let l = kittens_codegen::lower(&k, Target::Sm90a).unwrap_or_else(|e| panic!("{tile}: {e}"));
    if let Ok(dir) = std::env::var("KITTENS_DUMP") {
        let path = format!("{dir}/gemm_{tile}_{b_layout:?}_{loads:?}_c{cluster}.cu");
        std::fs::write(path, &l.source).expect("dump");
    }
    (cfg, l)
}
