//! 64-bit addressing of the lowered HIP: a 65536 × 65536 bf16 tensor (8 GiB) read through both load
//! paths (asynchronous into LDS, and into registers) on the host emulation, without allocating it. The
//! tensor is virtual: the emulation gives it an address range and reads its words as
//! `emulate::virtual_word(index)`, faulting on any access outside it; each run copies one 64 × 64 tile
//! to a small output, checked bit for bit. Before the rebased resources, byte offsets were 32-bit: the
//! tiles at and past 4 GiB read the wrong words (and the out-of-range marker sat inside the tensor).

use kittens_hw::dtype::DType::Bf16;
use kittens_hw::Arch;
use kittens_ir::{Access, Expr, GridOrder, Kernel, KernelBuilder, Schedule};
use kittens_runtime::amd::emulate::{virtual_word, Emulator, HostTensor};
use kittens_tile::{BaseShape, Layout, Swizzle};

const SIDE: i64 = 65536;

/// `o = a[64·blk0 .., 64·blk1 ..]` (64 × 64 bf16 tiles), through LDS or straight into registers.
fn copy_tile(via_lds: bool) -> Kernel {
    let name = if via_lds { "copy_lds" } else { "copy_regs" };
    let mut b = KernelBuilder::new(name, Schedule::Plain { waves: 4 });
    let (m, k) = (b.param("M"), b.param("K"));
    let a = b.global(
        "a",
        Bf16,
        &[("m", m.clone()), ("k", k.clone())],
        Access::Read,
    );
    let o = b.global(
        "o",
        Bf16,
        &[("r", Expr::c(64)), ("c", Expr::c(64))],
        Access::Write,
    );
    b.grid(vec![m.ceil_div(64), k.ceil_div(64)], GridOrder::RowMajor);
    let r = b.tile("r", Bf16, 16, 64, Layout::Row, BaseShape::S16X32);
    let (row, col) = (b.block(0), b.block(1));
    if via_lds {
        let s = b.shared("s", Bf16, 64, 64, Swizzle::None, 1);
        let src = b.gtile(a, 64, 64, row, col);
        b.load_async(b.smem(s, 0), src);
        b.wait_async(0);
        b.barrier();
        b.load(r, b.smem(s, 0).sub(16, 64, Expr::Wave, 0));
        b.wait_shared(0);
    } else {
        let src = b.gtile(a, 16, 64, &row * 4 + Expr::Wave, col);
        b.load_global(r, src);
    }
    let dst = b.gtile(o, 16, 64, Expr::Wave, 0);
    b.store(dst, r);
    b.finish().expect("builds")
}

fn copies_tiles_past_4_gib(via_lds: bool, arch: Arch) {
    let kernel = copy_tile(via_lds);
    let emu = Emulator::build(&kernel, arch).expect("lowers and compiles for the host");
    let tiles = SIDE / 64;
    let bytes = (SIDE * SIDE * 2) as u64;
    // The first tile, the tile at exactly 2 GiB and 4 GiB (row 16384, 32768), one in the last 4 GiB
    // off the diagonal, and the last tile (its last byte is the tensor's).
    for (bi, bj) in [
        (0, 0),
        (256, 0),
        (512, 0),
        (700, 333),
        (tiles - 1, tiles - 1),
    ] {
        let mut t = vec![
            HostTensor::Virtual { bytes },
            HostTensor::Data(vec![0xff; 64 * 64 * 2]),
        ];
        let id = (bi * tiles + bj) as u64;
        emu.run(&[SIDE, SIDE], &mut t, Some(&[id]))
            .unwrap_or_else(|e| {
                panic!("{} {}: tile ({bi}, {bj}): {e}", kernel.name, arch.target())
            });
        let HostTensor::Data(o) = &t[1] else {
            unreachable!()
        };
        for r in 0..64 {
            for c in 0..64 {
                let i = ((bi * 64 + r) * SIDE + bj * 64 + c) as u64;
                let got = u16::from_le_bytes([
                    o[2 * (r * 64 + c) as usize],
                    o[2 * (r * 64 + c) as usize + 1],
                ]);
                assert_eq!(
                    got,
                    virtual_word(i),
                    "{} {}: tile ({bi}, {bj}) element ({r}, {c}), byte offset {}",
                    kernel.name,
                    arch.target(),
                    2 * i
                );
            }
        }
    }
}

#[test]
fn async_loads_address_an_8_gib_tensor() {
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        copies_tiles_past_4_gib(true, arch);
    }
}

#[test]
fn register_loads_address_an_8_gib_tensor() {
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        copies_tiles_past_4_gib(false, arch);
    }
}

/// A tile whose rows are so far apart that its lanes' 32-bit offsets from the tile's resource would
/// wrap is refused at launch, naming the limit (here 16 rows of 2^27 bf16: 3.75 GiB).
#[test]
fn launch_refuses_a_tile_spanning_over_2_gib() {
    let k = copy_tile(false);
    let err = kittens_codegen::hip::check_launch(&k, &[16, 1 << 27]).unwrap_err();
    assert!(err.to_string().contains("2147483632"), "{err}");
    kittens_codegen::hip::check_launch(&k, &[SIDE, SIDE]).expect("65536-wide rows fit");
}
