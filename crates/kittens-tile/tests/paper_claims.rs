//! The bank-conflict claims of HipKittens (§3.2.2 Fig. 4, D.1, Table 5), computed from the lane maps of the
//! matrix-instruction catalog, the phase table and the swizzles. Run with `--nocapture` to see the tables.

use kittens_hw::lds::DsInstr;
use kittens_tile::{
    analyze, BankReport, BaseShape, DType, Layout, RegTile, SharedTile, Swizzle, TileError,
};

fn report(
    rows: u32,
    cols: u32,
    layout: Layout,
    base: BaseShape,
    sw: Swizzle,
    instr: DsInstr,
) -> BankReport {
    let shared = SharedTile::with_swizzle(DType::Bf16, rows, cols, sw).unwrap();
    let reg = RegTile::new(DType::Bf16, rows, cols, layout, base).unwrap();
    let r = analyze(&shared, &reg, instr).unwrap();
    let per_phase: Vec<u32> = r.phases.iter().map(|p| p.conflict).collect();
    println!(
        "{rows}x{cols} {layout} {instr} swizzle {}: lane map {} {:?}, {} instruction(s), per phase {per_phase:?}, max {}",
        sw.name(),
        r.lane_map.0,
        r.lane_map.1,
        r.issues.len(),
        r.max_conflict
    );
    r
}

/// Fig. 4: the 16×32 bf16 row tile read with ds_read_b128 has 2-way conflicts unswizzled, none swizzled.
#[test]
fn fig4_ds_read_b128_16x32_row() {
    let plain = report(
        16,
        32,
        Layout::Row,
        BaseShape::S16X32,
        Swizzle::None,
        DsInstr::DsReadB128,
    );
    assert_eq!(plain.lane_map.0, "v_mfma_f32_16x16x32_bf16");
    // Lane l holds row l%16, cols 8*(l/16)..+8 of the 64-byte rows.
    for l in 0..64u32 {
        assert_eq!(
            plain.issues[0].addrs[l as usize],
            Some((l % 16) * 64 + (l / 16) * 16)
        );
    }
    assert_eq!(plain.max_conflict, 2);
    assert!(plain.phases.iter().all(|p| p.conflict == 2));
    let default = SharedTile::new(DType::Bf16, 16, 32).unwrap();
    assert_eq!(default.swizzle, Swizzle::HK_16X32);
    let swz = report(
        16,
        32,
        Layout::Row,
        BaseShape::S16X32,
        default.swizzle,
        DsInstr::DsReadB128,
    );
    assert_eq!(swz.max_conflict, 1);
}

/// Fig. 4 caption and D.1: the same swizzled tile read as a column-layout tile with ds_read_b64_tr_b16 is
/// conflict-free, and so is the unswizzled one ("an unswizzled pattern would be sufficient").
#[test]
fn d1_ds_read_b64_tr_b16_16x32_col() {
    for sw in [Swizzle::HK_16X32, Swizzle::None] {
        let r = report(
            16,
            32,
            Layout::Col,
            BaseShape::S16X32,
            sw,
            DsInstr::DsReadB64TrB16,
        );
        assert_eq!(r.lane_map.0, "v_mfma_f32_32x32x16_bf16");
        assert_eq!(r.issues.len(), 2, "two instructions load the tile (D.1)");
        // D.1: thread 4 reads the first element of the second row; thread 0 receives rows 0-7 of column 0.
        assert_eq!(r.issues[0].elems[4][0], (1, 0));
        assert_eq!(r.issues[0].elems[0], vec![(0, 0), (0, 1), (0, 2), (0, 3)]);
        assert_eq!(r.max_conflict, 1);
    }
}

/// D.1: `offset ^= ((offset % 512) >> 7) << 3` makes the 16×16 row-layout ds_write_b64 store conflict-free.
#[test]
fn d1_ds_write_b64_16x16_row() {
    let plain = report(
        16,
        16,
        Layout::Row,
        BaseShape::S16X16,
        Swizzle::None,
        DsInstr::DsWriteB64,
    );
    assert_eq!(plain.lane_map.0, "v_mfma_f32_16x16x16_bf16");
    assert_eq!(plain.max_conflict, 4);
    let swz = report(
        16,
        16,
        Layout::Row,
        BaseShape::S16X16,
        Swizzle::DS_WRITE_B64_16X16,
        DsInstr::DsWriteB64,
    );
    assert_eq!(swz.max_conflict, 1);
}

/// D.1's counter-example, tested by search: the XOR family with bits 1..=3, base 3..=6, shift 1..=6
/// (72 members), each applied to the 16×16 tile for the ds_write_b64 store and to the 16×32 tile for the
/// ds_read_b128 load.
#[test]
fn d1_no_single_xor_swizzle_serves_both() {
    let store = |sw| outcome(16, 16, BaseShape::S16X16, sw, DsInstr::DsWriteB64);
    let load = |sw| outcome(16, 32, BaseShape::S16X32, sw, DsInstr::DsReadB128);
    let (mut store_ok, mut load_ok, mut both) = (vec![], vec![], vec![]);
    println!(
        "{:<14} {:<28} {:<28}",
        "swizzle", "16x16 ds_write_b64", "16x32 ds_read_b128"
    );
    for bits in 1..=3 {
        for base in 3..=6 {
            for shift in 1..=6 {
                let sw = Swizzle::Xor { bits, base, shift };
                let (s, l) = (store(sw), load(sw));
                println!("{:<14} {:<28} {:<28}", sw.name(), show(&s), show(&l));
                let free = |o: &Result<u32, TileError>| o.as_ref().is_ok_and(|&d| d == 1);
                if free(&s) {
                    store_ok.push(sw.name());
                }
                if free(&l) {
                    load_ok.push(sw.name());
                }
                if free(&s) && free(&l) {
                    both.push(sw.name());
                }
            }
        }
    }
    println!("conflict-free store: {store_ok:?}");
    println!("conflict-free load:  {load_ok:?}");
    println!("both:                {both:?}");
    assert!(store_ok.contains(&Swizzle::DS_WRITE_B64_16X16.name()));
    assert!(load_ok.contains(&Swizzle::HK_16X32.name()));
    assert!(
        both.is_empty(),
        "D.1 claims no single swizzle serves both; found {both:?}"
    );
}

fn outcome(
    rows: u32,
    cols: u32,
    base: BaseShape,
    sw: Swizzle,
    instr: DsInstr,
) -> Result<u32, TileError> {
    let shared = SharedTile::with_swizzle(DType::Bf16, rows, cols, sw)?;
    let reg = RegTile::new(DType::Bf16, rows, cols, Layout::Row, base)?;
    Ok(analyze(&shared, &reg, instr)?.max_conflict)
}

fn show(o: &Result<u32, TileError>) -> String {
    match o {
        Ok(d) => format!("{d}-way"),
        Err(TileError::SwizzleSplitsAccess { .. }) => "splits 16B accesses".into(),
        Err(e) => format!("error: {e}"),
    }
}

/// Hopper: ldmatrix.x4 reads of a 64-wide bf16 tile (A fragments of mma.m16n8k16) are 8-way conflicted
/// unswizzled and conflict-free under the 128-, 64- and 32-byte swizzle modes, each mode applied the way TMA
/// applies it: to boxes whose rows span the swizzle width (128 B = the whole 64-wide row; 64 B and 32 B =
/// 32- and 16-wide boxes stored one after the other).
#[test]
fn hopper_ldmatrix_64_wide() {
    let reg = RegTile::new(DType::Bf16, 64, 64, Layout::Row, BaseShape::S16X16).unwrap();
    let run = |box_cols: u32, sw: Swizzle| {
        let shared = SharedTile::with_swizzle(DType::Bf16, 64, box_cols, sw).unwrap();
        let r = analyze(&shared, &reg, DsInstr::Ldmatrix).unwrap();
        println!(
            "64x64 bf16, boxes 64x{box_cols} swizzle {}: {} ldmatrix.x4, max {}",
            sw.name(),
            r.issues.len(),
            r.max_conflict
        );
        r
    };
    let plain = run(64, Swizzle::None);
    assert_eq!(
        plain.lane_map.0,
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    );
    assert_eq!(plain.issues.len(), 16);
    assert_eq!(plain.max_conflict, 8);
    assert_eq!(run(64, Swizzle::NV_128B).max_conflict, 1);
    assert_eq!(run(32, Swizzle::NV_64B).max_conflict, 1);
    assert_eq!(run(16, Swizzle::NV_32B).max_conflict, 1);
    // The narrower modes on full 128-byte rows (not a layout TMA produces) leave conflicts.
    assert_eq!(run(64, Swizzle::NV_64B).max_conflict, 2);
    assert_eq!(run(64, Swizzle::NV_32B).max_conflict, 4);
}

/// D.1's shape rule, through the analyzer: a 16×16 shared tile may fill a 32×16 register tile, a 16×32 one
/// may not.
#[test]
fn d1_shape_rule_in_analysis() {
    let reg = RegTile::new(DType::Bf16, 32, 16, Layout::Row, BaseShape::S32X16).unwrap();
    let s16x32 = SharedTile::new(DType::Bf16, 16, 32).unwrap();
    let s16x16 = SharedTile::new(DType::Bf16, 16, 16).unwrap();
    assert!(matches!(
        analyze(&s16x32, &reg, DsInstr::DsReadB128),
        Err(TileError::IncompatibleShapes { .. })
    ));
    let r = analyze(&s16x16, &reg, DsInstr::DsReadB128);
    println!(
        "16x16 shared -> 32x16 row register tile, ds_read_b128: {:?}",
        r.as_ref().map(|r| r.max_conflict)
    );
    // 16x16 swizzle (2,3,4) moves 8-byte chunks, so it splits the 16-byte accesses of the 32x16 tile;
    // HipKittens loads that pair with two ds_read_b64 per 8 elements instead.
    assert!(matches!(r, Err(TileError::SwizzleSplitsAccess { .. })));
    let b64 = analyze(&s16x16, &reg, DsInstr::DsReadB64).unwrap();
    println!(
        "  with ds_read_b64: {} instructions, max {}",
        b64.issues.len(),
        b64.max_conflict
    );
    assert_eq!(b64.issues.len(), 2);
}
