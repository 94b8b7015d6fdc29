//! Runs the *lowered HIP* of the ping-pong GEMM on the CPU: the generated source is compiled for the
//! host against `amd_support/emu.h` (a stand-in for the prelude: threads for lanes, static storage for
//! LDS, wave-collective MFMAs on the ISA lane maps) and its output compared with an f64 reference.
//! This checks the lowering's index math, swizzles, buffer placement, lane maps and MFMA plumbing on
//! both targets' code paths; it says nothing about timing, and waits are not modelled (the schedule
//! analysis checks those). No AMD GPU is involved.

#[path = "amd_support/common.rs"]
mod amd_common;
#[path = "amd_support/gemm.rs"]
mod gemm;

use kittens_codegen::hip::{lower, PRELUDE};
use kittens_hw::Arch;
use kittens_ir::Kernel;
use kittens_runtime::amd::cache_dir;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What both host drivers start with: the headers and a reader of the raw bf16 inputs.
const DRIVER_IO: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
static std::vector<unsigned short> read_u16(const char* path, size_t n) {
  std::vector<unsigned short> v(n);
  FILE* f = fopen(path, "rb");
  if (!f || fread(v.data(), 2, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
  fclose(f);
  return v;
}
"#;

const DRIVER: &str = r#"
int main(int argc, char** argv) {
  if (argc != 8) return 2;
  const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), blocks = atoi(argv[7]);
  auto a = read_u16(argv[4], (size_t)M * K), b = read_u16(argv[5], (size_t)N * K);
  std::vector<unsigned short> c((size_t)M * N, 0x7fc0);  // NaN: every element must be written
  for (int blk = 0; blk < blocks; ++blk) {
    std::barrier<> bar(THREADS);
    kittens::emu_block_barrier = &bar;
    std::vector<std::thread> ts;
    for (int t = 0; t < THREADS; ++t)
      ts.emplace_back([&, t] { kittens::emu_tid = t; kittens::emu_bid = blk; KERNEL(a.data(), b.data(), c.data(), M, N, K); });
    for (auto& t : ts) t.join();
  }
  FILE* f = fopen(argv[6], "wb");
  fwrite(c.data(), 2, c.size(), f);
  fclose(f);
  return 0;
}
"#;

/// A host C++20 compiler: Debian's clang++-19, else the ziglang package's `zig c++`.
fn host_cxx() -> Vec<String> {
    let zig = cache_dir().join("ziglang/ziglang/zig");
    if Command::new("clang++-19")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        vec!["clang++-19".into()]
    } else if zig.is_file() {
        vec![zig.display().to_string(), "c++".into()]
    } else {
        panic!("no host C++ compiler: run scripts/install-amdgpu-clang.sh")
    }
}

fn build_emulator(kernel: &Kernel, arch: Arch, dir: &Path) -> PathBuf {
    build_with_driver(kernel, arch, dir, DRIVER)
}

fn build_with_driver(kernel: &Kernel, arch: Arch, dir: &Path, driver: &str) -> PathBuf {
    let src = lower(kernel, arch).expect("lowers").source;
    let body = src
        .strip_prefix(PRELUDE)
        .expect("lowered source starts with the prelude");
    let emu = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/amd_support/emu.h");
    let driver = driver
        .replace("THREADS", &(64 * kernel.waves).to_string())
        .replace("KERNEL", &kernel.name);
    let cpp = dir.join("emu.cpp");
    std::fs::write(
        &cpp,
        format!(
            "#include \"{}\"\n{body}\n{DRIVER_IO}{driver}",
            emu.display()
        ),
    )
    .unwrap();
    let exe = dir.join("emu");
    let cxx = host_cxx();
    let out = Command::new(&cxx[0])
        .args(&cxx[1..])
        .args(["-std=c++20", "-O2", "-pthread", "-w", "-o"])
        .arg(&exe)
        .arg(&cpp)
        .output()
        .expect("host compiler runs");
    assert!(
        out.status.success(),
        "host compile failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

fn f32_of(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Run the emulated kernel on random bf16 inputs and check every output against f64.
/// Blocks the kernel launches for these parameters: the product of its grid extents.
fn blocks(kernel: &Kernel, params: &[i64]) -> i64 {
    let env = kittens_ir::Env {
        params,
        vars: &[],
        block: &[],
        wave: 0,
    };
    kernel
        .grid
        .extents
        .iter()
        .map(|e| e.eval(&env).expect("grid extent evaluates"))
        .product()
}

fn check(tag: &str, kernel: &Kernel, arch: Arch, shapes: &[(usize, usize, usize)]) {
    let dir = std::env::temp_dir().join(format!(
        "kittens-emu-{tag}-{}-{}",
        arch.target(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = build_emulator(kernel, arch, &dir);
    for &(m, n, k) in shapes {
        let mut rng = SmallRng::seed_from_u64((m * 131 + n * 17 + k) as u64);
        let mut gen = |len: usize| {
            (0..len)
                .map(|_| bf16_bits(rng.gen_range(-1.0f32..1.0)))
                .collect::<Vec<u16>>()
        };
        let (a, b) = (gen(m * k), gen(n * k));
        let write = |name: &str, v: &[u16]| {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            std::fs::write(dir.join(name), bytes).unwrap();
        };
        write("a.bin", &a);
        write("b.bin", &b);
        let status = Command::new(&exe)
            .args([m, n, k].map(|x| x.to_string()))
            .args([dir.join("a.bin"), dir.join("b.bin"), dir.join("c.bin")])
            .arg(blocks(kernel, &[m as i64, n as i64, k as i64]).to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let c: Vec<u16> = std::fs::read(dir.join("c.bin"))
            .unwrap()
            .chunks(2)
            .map(|p| u16::from_le_bytes([p[0], p[1]]))
            .collect();
        let mut worst = 0.0f64;
        for i in 0..m {
            for j in 0..n {
                let (mut r, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let x = f32_of(a[i * k + p]) as f64 * f32_of(b[j * k + p]) as f64;
                    r += x;
                    mag += x.abs();
                }
                let bound = r.abs() * 2f64.powi(-8) + mag * k as f64 * f32::EPSILON as f64 + 1e-30;
                let got = f32_of(c[i * n + j]) as f64;
                assert!(
                    (got - r).abs() <= bound,
                    "{} {m}x{n}x{k}: C[{i}][{j}] = {got}, reference {r}",
                    arch.target()
                );
                worst = worst.max((got - r).abs() / bound);
            }
        }
        eprintln!(
            "{} {} {m}x{n}x{k}: worst error {worst:.3} of the bound",
            kernel.name,
            arch.target()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lowered_gemm_runs_right_gfx950_path() {
    check(
        "test",
        &gemm::gemm_bf16(Arch::Cdna4),
        Arch::Cdna4,
        &[(256, 256, 128), (264, 300, 72)],
    );
}

#[test]
fn lowered_gemm_runs_right_gfx942_path() {
    check(
        "test",
        &gemm::gemm_bf16(Arch::Cdna3),
        Arch::Cdna3,
        &[(256, 256, 128), (264, 300, 72)],
    );
}

/// The registry's gemm_bf16 (kittens-kernels) through the same path, configured as `kittens compile`
/// configures it per target (`GemmConfig::for_gpu`): MI355X double-buffers in LDS (gfx950), MI325X
/// stages the next K step in registers (gfx942, seed 000 E.1).
#[test]
fn registry_gemm_runs_right_both_paths() {
    use kittens_kernels::gemm_bf16::{build, GemmConfig, Staging};
    for (gpu, staging) in [("mi355x", Staging::Lds), ("mi325x", Staging::Registers)] {
        let g = kittens_hw::gpu(gpu).unwrap();
        let cfg = GemmConfig::for_gpu(g);
        assert_eq!(cfg.staging, staging);
        let k = build(&cfg).unwrap();
        check("registry", &k, g.arch, &[(256, 256, 128), (300, 264, 72)]);
    }
}

/// Swizzled shared tiles (HipKittens' 16×32 XOR on a 64×32 A tile, the two-term 32×32 XOR on B): the
/// async loads fetch each LDS byte's logical element through the inverse swizzle and the LDS reads
/// apply the swizzle, so the product is still right.
fn swizzled_gemm() -> Kernel {
    use kittens_hw::dtype::DType;
    use kittens_ir::{Expr, GridOrder, KernelBuilder, Schedule};
    use kittens_tile::{BaseShape, Layout, SharedTile, Swizzle};
    let mut b = KernelBuilder::new("swizzled_gemm", Schedule::Plain { waves: 4 });
    let gemm::AbtOperands {
        m,
        n,
        k,
        a: ga,
        b: gb,
        c: gc,
    } = gemm::abt_operands(&mut b, DType::Bf16);
    b.grid(vec![m.ceil_div(64), n.ceil_div(32)], GridOrder::RowMajor);
    let sa = b.shared("sa", DType::Bf16, 64, 32, Swizzle::HK_16X32, 1);
    let sb = b.shared_tile("sb", SharedTile::new(DType::Bf16, 32, 32), 1);
    let ra = b.tile("ra", DType::Bf16, 16, 32, Layout::Row, BaseShape::S16X32);
    let rb = b.tile("rb", DType::Bf16, 32, 32, Layout::Row, BaseShape::S16X32);
    let rc = b.tile("rc", DType::F32, 16, 32, Layout::Col, BaseShape::S16X16);
    b.zero(rc);
    let (row, col) = (b.block(0), b.block(1));
    b.for_range("t", 0, k.ceil_div(32), |b, t| {
        let (da, db) = (b.smem(sa, 0), b.smem(sb, 0));
        let (srca, srcb) = (
            b.gtile(ga, 64, 32, row.clone(), t.clone()),
            b.gtile(gb, 32, 32, col.clone(), t),
        );
        b.load_async(da, srca);
        b.load_async(db, srcb);
        b.wait_async(0);
        b.barrier();
        let (va, vb) = (b.smem(sa, 0).sub(16, 32, Expr::Wave, 0), b.smem(sb, 0));
        b.load(ra, va);
        b.load(rb, vb);
        b.wait_shared(0);
        b.barrier();
        b.mma_abt(rc, ra, rb, rc);
    });
    let dst = b.gtile(gc, 16, 32, &row * 4 + Expr::Wave, col);
    b.store(dst, rc);
    b.finish().expect("builds")
}

#[test]
fn swizzled_tiles_run_right_on_both_targets() {
    let k = swizzled_gemm();
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        let src = lower(&k, arch).unwrap().source;
        assert!(
            src.contains("xor_flips<1, 5, 4>") && src.contains("xor_flips<1, 4, 6>"),
            "both swizzles applied"
        );
        check("swizzled", &k, arch, &[(64, 32, 64), (100, 70, 72)]);
    }
}

/// Host driver for attention: `batch heads heads_kv seq dim q.bin k.bin v.bin o.bin blocks`.
const ATTN_DRIVER: &str = r#"
int main(int argc, char** argv) {
  if (argc != 11) return 2;
  const int B = atoi(argv[1]), H = atoi(argv[2]), HK = atoi(argv[3]), S = atoi(argv[4]), D = atoi(argv[5]);
  const int blocks = atoi(argv[10]);
  auto q = read_u16(argv[6], (size_t)B * H * S * D), k = read_u16(argv[7], (size_t)B * HK * S * D);
  auto v = read_u16(argv[8], (size_t)B * HK * S * D);
  std::vector<unsigned short> o((size_t)B * H * S * D, 0x7fc0);  // NaN: every element must be written
  for (int blk = 0; blk < blocks; ++blk) {
    std::barrier<> bar(THREADS);
    kittens::emu_block_barrier = &bar;
    std::vector<std::thread> ts;
    for (int t = 0; t < THREADS; ++t)
      ts.emplace_back([&, t] { kittens::emu_tid = t; kittens::emu_bid = blk; KERNEL(q.data(), k.data(), v.data(), o.data(), B, H, HK, S); });
    for (auto& t : ts) t.join();
  }
  FILE* f = fopen(argv[9], "wb");
  fwrite(o.data(), 2, o.size(), f);
  fclose(f);
  return 0;
}
"#;

/// Run the lowered attention on random bf16 inputs, uniform in [-8, 8) (logits up to about ±90 at
/// head dim 128), for each shape and judge it against the f64 reference
/// (`kittens_kernels::reference::attention`) by the test rule (`check_rule`: at most 2x the error of
/// PyTorch-style bf16 attention, plus a floor) on `rel_err` and `max_rel`; returns the worst `rel_err`
/// (‖out − ref‖_F / ‖ref‖_F).
fn check_attention(
    cfg: &kittens_kernels::attn_fwd::AttnConfig,
    arch: Arch,
    shapes: &[kittens_kernels::reference::AttnShape],
) -> f64 {
    use kittens_kernels::reference::{attention, attention_bf16_baseline, check_rule, compare};
    let kernel = kittens_kernels::attn_fwd::build(cfg).expect("attn_fwd builds");
    let dir = std::env::temp_dir().join(format!(
        "kittens-emu-{}-{}-{}",
        kernel.name,
        arch.target(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = build_with_driver(&kernel, arch, &dir, ATTN_DRIVER);
    let mut worst = 0.0f64;
    for sh in shapes {
        assert_eq!(sh.layout, cfg.layout);
        let mut rng = SmallRng::seed_from_u64((sh.seq * 7 + sh.heads) as u64);
        let mut gen = |len: usize| {
            (0..len)
                .map(|_| bf16_bits(rng.gen_range(-8.0f32..8.0)))
                .collect::<Vec<u16>>()
        };
        let (q, k, v) = (
            gen(sh.len(sh.heads)),
            gen(sh.len(sh.heads_kv)),
            gen(sh.len(sh.heads_kv)),
        );
        for (name, t) in [("q.bin", &q), ("k.bin", &k), ("v.bin", &v)] {
            let bytes: Vec<u8> = t.iter().flat_map(|x| x.to_le_bytes()).collect();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let params = [sh.batch, sh.heads, sh.heads_kv, sh.seq].map(|x| x as i64);
        let status = Command::new(&exe)
            .args([sh.batch, sh.heads, sh.heads_kv, sh.seq, sh.dim].map(|x| x.to_string()))
            .args(["q.bin", "k.bin", "v.bin", "o.bin"].map(|n| dir.join(n)))
            .arg(blocks(&kernel, &params).to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let o: Vec<f32> = std::fs::read(dir.join("o.bin"))
            .unwrap()
            .chunks(2)
            .map(|p| f32_of(u16::from_le_bytes([p[0], p[1]])))
            .collect();
        let f = |t: &[u16]| t.iter().map(|&x| f32_of(x)).collect::<Vec<f32>>();
        let (q, k, v) = (f(&q), f(&k), f(&v));
        let r = attention(&q, &k, &v, sh, cfg.causal);
        let e = compare(&o, &r);
        let b = compare(&attention_bf16_baseline(&q, &k, &v, sh, cfg.causal), &r);
        eprintln!(
            "{} {} {sh:?}: {e:?}, baseline {b:?}",
            kernel.name,
            arch.target()
        );
        for (ours, base) in [(e.rel_err, b.rel_err), (e.max_rel, b.max_rel)] {
            let v = check_rule(ours, base);
            assert!(v.passed, "{} {sh:?}: {v:?}", arch.target());
        }
        worst = worst.max(e.rel_err);
    }
    let _ = std::fs::remove_dir_all(&dir);
    worst
}

/// Attention shapes: GQA (4 query heads on 2 KV heads), a sequence that is not a multiple of the
/// 32-key block nor of the 256-query block, and two query blocks.
fn attn_shapes(
    layout: kittens_kernels::attn_fwd::AttnLayout,
) -> Vec<kittens_kernels::reference::AttnShape> {
    let sh = |batch, heads, heads_kv, seq| kittens_kernels::reference::AttnShape {
        batch,
        heads,
        heads_kv,
        seq,
        dim: 128,
        layout,
    };
    vec![sh(1, 4, 2, 77), sh(2, 2, 1, 300)]
}

/// The registry's attn_fwd (seed 000 E.3: K·Qᵀ scores in the accumulator layout, column softmax through
/// lane butterflies, P through the LDS remap into the second MFMA's operand) as configured for each
/// target, causal and not, BSHD and BHSD.
#[test]
fn lowered_attention_matches_f64_both_paths() {
    use kittens_kernels::attn_fwd::{AttnConfig, AttnLayout};
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        for (causal, layout) in [(false, AttnLayout::Bshd), (true, AttnLayout::Bhsd)] {
            let cfg = AttnConfig {
                causal,
                layout,
                ..AttnConfig::default()
            };
            let e = check_attention(&cfg, arch, &attn_shapes(layout));
            eprintln!(
                "attn_fwd {} causal={causal}: worst rel_err {e:.2e}",
                arch.target()
            );
        }
    }
}
