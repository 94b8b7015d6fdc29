//! The generated wgmma wrappers (`kittens_codegen::cuda::wgmma_*wrapper*`) as NVRTC compiles them: each
//! is called from a probe kernel that reads every operand from its own offset of one buffer and writes
//! the accumulators back, and the PTX is read for what the instruction got. The accumulators are the
//! caller's D in order, each once (loaded from and stored back to `4·i`); the A registers and the
//! descriptors are the caller's; the scale-d predicate is the `accumulate` argument; the immediates
//! (scale-a, scale-b, transpose-A, transpose-B) are the wrapper's form (PTX ISA §9.7.15.5.2, bf16 takes
//! the transposes, e4m3 does not). ptxas then builds the cubin, which checks the operand count against
//! the shape. No GPU is needed.

#[path = "cuda_support/common.rs"]
mod cuda_common;

use cuda_common::ensure_nvrtc;
use kittens_codegen::cuda::{
    rs_wrapper_name, wgmma_rs_wrapper, wgmma_rs_wrapper_split, wgmma_wrapper, wgmma_wrapper_ta,
    wgmma_wrapper_ta_tb, wgmma_wrapper_tb, WgmmaInput, PRELUDE,
};
use std::collections::HashMap;

/// Byte offsets of the operands in the probe's buffer: D at 0 (4 bytes per accumulator), the two
/// descriptors, the four A registers, the accumulate flag.
const DESC: u32 = 1024;
const A_REGS: u32 = 2048;
const FLAG: u32 = 3072;

/// How the probe calls the wrapper.
enum Call {
    /// `(d, desc_a, desc_b, accumulate)`.
    Shared,
    /// `(d, a0, a1, a2, a3, desc_b, accumulate)`.
    Registers,
    /// The same with D as two arrays of half the accumulators each.
    RegistersSplit,
}

/// A translation unit: the prelude, `wrapper` in `namespace kt`, and a probe kernel calling `name`
/// with `regs` accumulators.
fn probe(wrapper: &str, name: &str, regs: u32, call: Call) -> String {
    let args = match call {
        Call::Shared => format!("u64_at({DESC}), u64_at({}), u32_at({FLAG})", DESC + 8),
        Call::Registers | Call::RegistersSplit => format!(
            "u32_at({A_REGS}), u32_at({}), u32_at({}), u32_at({}), u64_at({}), u32_at({FLAG})",
            A_REGS + 4,
            A_REGS + 8,
            A_REGS + 12,
            DESC + 8
        ),
    };
    let body = match call {
        Call::RegistersSplit => {
            let h = regs / 2;
            format!(
                "float d0[{h}], d1[{h}];\n\
                 for (int i = 0; i < {h}; ++i) {{ d0[i] = f[i]; d1[i] = f[{h} + i]; }}\n\
                 kt::{name}(d0, d1, {args});\n\
                 for (int i = 0; i < {h}; ++i) {{ f[i] = d0[i]; f[{h} + i] = d1[i]; }}\n"
            )
        }
        _ => format!(
            "float d[{regs}];\n\
             for (int i = 0; i < {regs}; ++i) d[i] = f[i];\n\
             kt::{name}(d, {args});\n\
             for (int i = 0; i < {regs}; ++i) f[i] = d[i];\n"
        ),
    };
    format!(
        "{PRELUDE}\nnamespace kt {{\n{wrapper}}} // namespace kt\n\
         extern \"C\" __global__ void probe(unsigned char* buf) {{\n\
         float* f = reinterpret_cast<float*>(buf);\n\
         auto u64_at = [&](int o) {{ return *reinterpret_cast<const u64*>(buf + o); }};\n\
         auto u32_at = [&](int o) {{ return *reinterpret_cast<const u32*>(buf + o); }};\n\
         {body}}}\n"
    )
}

/// What the PTX's one wgmma got, each register operand resolved to the buffer offset it was loaded
/// from.
#[derive(Debug)]
struct Issued {
    /// `m64n256k16.f32.bf16.bf16`.
    shape: String,
    /// The accumulators' offsets, in operand order.
    d: Vec<u32>,
    /// The A registers' offsets (register-A forms only).
    a: Vec<u32>,
    /// The descriptors' offsets.
    desc: Vec<u32>,
    /// The offset of the register the predicate was set from (`setp.ne.b32 p, %r, 0`).
    flag: u32,
    /// The immediates after the predicate.
    imm: Vec<u32>,
    /// For each accumulator, the offset its register is stored back to.
    d_out: Vec<Option<u32>>,
}

/// `[%rd5]` or `[%rd5+12]` → (base, offset).
fn address(s: &str) -> (String, u32) {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    match s.split_once('+') {
        Some((b, o)) => (b.to_string(), o.parse().unwrap()),
        None => (s.to_string(), 0),
    }
}

/// The registers of an operand list `{%f1, %f2}` or a single `%f1`.
fn regs(s: &str) -> Vec<String> {
    s.trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .split(',')
        .map(|r| r.trim().to_string())
        .collect()
}

fn issued(ptx: &str) -> Issued {
    // Register → offset loaded from, offset → register stored there; every access off one base.
    let mut loaded: HashMap<String, u32> = HashMap::new();
    let mut stored: HashMap<String, u32> = HashMap::new();
    let mut bases = std::collections::BTreeSet::new();
    let width = |op: &str| -> u32 {
        if op.contains(".u64") || op.contains(".b64") {
            8
        } else {
            4
        }
    };
    let mut setp = HashMap::new();
    let mut wgmma = Vec::new();
    for line in ptx.lines().map(str::trim) {
        let Some((op, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let rest = rest.trim_end_matches(';');
        if op.starts_with("ld.") && !op.starts_with("ld.param") {
            let (dst, addr) = rest.rsplit_once(", [").unwrap();
            let (base, off) = address(&format!("[{addr}"));
            bases.insert(base);
            let w = width(op);
            for (j, r) in regs(dst).into_iter().enumerate() {
                loaded.insert(r, off + w * j as u32);
            }
        } else if op.starts_with("st.") && !op.starts_with("st.param") {
            let (addr, src) = rest.split_once("], ").unwrap();
            let (base, off) = address(&format!("{addr}]"));
            bases.insert(base);
            let w = width(op);
            for (j, r) in regs(src).into_iter().enumerate() {
                stored.insert(r, off + w * j as u32);
            }
        } else if op == "setp.ne.b32" {
            let ops = regs(rest);
            setp.insert(ops[0].clone(), ops[1].clone());
        } else if let Some(shape) = op.strip_prefix("wgmma.mma_async.sync.aligned.") {
            wgmma.push((shape.to_string(), rest.to_string()));
        }
    }
    assert_eq!(bases.len(), 1, "one buffer, one base register: {bases:?}");
    assert_eq!(wgmma.len(), 1, "one wgmma per probe");
    let (shape, rest) = wgmma.pop().unwrap();
    // `{d…}, {a…}?, %rd…, p, imm…`: split on the braces first.
    let at = |r: &String| {
        *loaded
            .get(r)
            .unwrap_or_else(|| panic!("{r} not loaded from the buffer"))
    };
    let (d_list, tail) = rest.split_once('}').unwrap();
    let d_regs = regs(d_list);
    let tail = tail.trim_start_matches(',').trim();
    let (a_regs, tail) = match tail.strip_prefix('{') {
        Some(t) => {
            let (a, t) = t.split_once('}').unwrap();
            (regs(a), t.trim_start_matches(',').trim())
        }
        None => (vec![], tail),
    };
    let ops = regs(tail);
    let p = ops.iter().position(|o| !o.starts_with('%')).unwrap();
    let flag_reg = setp
        .get(&ops[p])
        .unwrap_or_else(|| panic!("no setp for {}", ops[p]));
    Issued {
        shape,
        d: d_regs.iter().map(at).collect(),
        a: a_regs.iter().map(at).collect(),
        desc: ops[..p].iter().map(at).collect(),
        flag: at(flag_reg),
        imm: ops[p + 1..].iter().map(|o| o.parse().unwrap()).collect(),
        d_out: d_regs.iter().map(|r| stored.get(r).copied()).collect(),
    }
}

/// Compiles the probe to PTX (read) and to a cubin (ptxas accepts it).
fn compile(src: &str) -> Issued {
    ensure_nvrtc();
    let ptx = kittens_runtime::cuda::ptx(src, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
    kittens_runtime::cuda::compile_with_cache(src, "probe", "sm_90a", 0, None)
        .unwrap_or_else(|e| panic!("ptxas: {e}"));
    issued(&ptx)
}

/// D in order, each accumulator once, read and written back at its own offset.
fn assert_accumulators(i: &Issued, regs: u32) {
    let want: Vec<u32> = (0..regs).map(|j| 4 * j).collect();
    assert_eq!(i.d, want, "{}", i.shape);
    assert_eq!(
        i.d_out,
        want.iter().map(|&o| Some(o)).collect::<Vec<_>>(),
        "{}",
        i.shape
    );
    assert_eq!(i.flag, FLAG, "scale-d is the accumulate argument");
}

#[test]
fn shared_operand_wrappers_pass_every_operand_in_place() {
    // (wrapper, name, N, K, type, immediates after the predicate)
    let cases = [
        (
            wgmma_wrapper(WgmmaInput::Bf16, 256),
            WgmmaInput::Bf16.wrapper_name(256),
            256,
            "k16.f32.bf16.bf16",
            vec![1, 1, 0, 0],
        ),
        (
            wgmma_wrapper(WgmmaInput::Fp8E4m3, 128),
            WgmmaInput::Fp8E4m3.wrapper_name(128),
            128,
            "k32.f32.e4m3.e4m3",
            vec![1, 1],
        ),
        (
            wgmma_wrapper_tb(128),
            WgmmaInput::Bf16.wrapper_name_tb(128),
            128,
            "k16.f32.bf16.bf16",
            vec![1, 1, 0, 1],
        ),
        (
            wgmma_wrapper_ta(64),
            WgmmaInput::Bf16.wrapper_name_ta(64),
            64,
            "k16.f32.bf16.bf16",
            vec![1, 1, 1, 0],
        ),
        (
            wgmma_wrapper_ta_tb(64),
            WgmmaInput::Bf16.wrapper_name_ta_tb(64),
            64,
            "k16.f32.bf16.bf16",
            vec![1, 1, 1, 1],
        ),
    ];
    for (wrapper, name, n, ty, imm) in cases {
        let i = compile(&probe(&wrapper, &name, n / 2, Call::Shared));
        assert_eq!(i.shape, format!("m64n{n}{ty}"), "{name}");
        assert_accumulators(&i, n / 2);
        assert!(i.a.is_empty(), "{name}");
        assert_eq!(i.desc, [DESC, DESC + 8], "{name}: A's then B's descriptor");
        assert_eq!(i.imm, imm, "{name}");
    }
}

#[test]
fn register_a_wrappers_pass_the_fragment_then_the_descriptor() {
    for (n, trans_b, split) in [(64, true, false), (128, false, false), (128, true, true)] {
        let base = rs_wrapper_name(n, trans_b);
        let (wrapper, name, call) = if split {
            (
                wgmma_rs_wrapper_split(n, trans_b),
                format!("{base}_split"),
                Call::RegistersSplit,
            )
        } else {
            (wgmma_rs_wrapper(n, trans_b), base, Call::Registers)
        };
        let i = compile(&probe(&wrapper, &name, n / 2, call));
        assert_eq!(i.shape, format!("m64n{n}k16.f32.bf16.bf16"), "{name}");
        // Split: d0 holds the first N/4 accumulators and d1 the rest, so D is still 0, 4, 8, … .
        assert_accumulators(&i, n / 2);
        assert_eq!(i.a, [A_REGS, A_REGS + 4, A_REGS + 8, A_REGS + 12], "{name}");
        assert_eq!(i.desc, [DESC + 8], "{name}: B's descriptor only");
        assert_eq!(i.imm, [1, 1, u32::from(trans_b)], "{name}");
    }
}
