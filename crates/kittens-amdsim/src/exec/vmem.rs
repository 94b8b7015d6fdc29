//! Issuing memory instructions: addresses and store data are taken at issue, the effect is put in
//! flight ([`super::pending`]). Buffer addressing and range checks follow the CDNA3 ISA guide's
//! "Buffer Addressing" for raw buffers (stride 0, no swizzle): the byte offset is VGPR offset (when
//! OFFEN) + instruction offset, range-checked against NUM_RECORDS, and SOFFSET is added after the
//! check (LLVM IntrinsicsAMDGPU.td: soffset is "excluded from bounds checking"). A lane whose access
//! starts at or past NUM_RECORDS reads 0 (stores are dropped); one that straddles it is an error,
//! since the hardware's per-dword check would split it and our kernels never rely on that.
//! `buffer_load ... lds` writes lane l's bytes to LDS at M0 + instruction offset + l · bytes.

use super::pending::{Counter, Effect, Lane};
use super::wave::{Wave, LANES};
use super::{ExecError, Group};
use crate::decode::{Instr, Op, NONE};
use std::array::from_fn;

/// Bytes per lane of a memory operation.
fn bytes_of(op: Op) -> u32 {
    let n = op.name().trim_end_matches("_d16_hi");
    if n.ends_with("ubyte") || n.ends_with("_byte") || n.ends_with("b8") {
        1
    } else if n.ends_with("ushort")
        || n.ends_with("short")
        || n.ends_with("b16")
        || n.ends_with("u16")
    {
        2
    } else if n.ends_with("x4") || n.ends_with("b128") {
        16
    } else if n.ends_with("x2") || n.ends_with("b64") {
        8
    } else if n.ends_with("x3") {
        12
    } else {
        4
    }
}

fn regs(w: &Wave, r: usize, dwords: usize) -> Vec<[u32; LANES]> {
    (0..dwords).map(|d| w.v[r + d]).collect()
}

pub(super) fn smem(g: &mut Group, wv: usize, i: &Instr) -> Result<(), ExecError> {
    let w = &g.waves[wv];
    let base = w.s64(i, i.src[0])?;
    let soff = if i.src[1] == NONE {
        0
    } else {
        w.s32(i, i.src[1])? as u64
    };
    let addr = base.wrapping_add(i.imm as u64).wrapping_add(soff) & !3;
    let dwords = i.op.widths()[0] as u32;
    g.issue(
        wv,
        i,
        Counter::Smem,
        Effect::SmemLoad {
            dst: i.dst,
            dwords,
            addr,
        },
    );
    Ok(())
}

pub(super) fn ds(g: &mut Group, wv: usize, i: &Instr) -> Result<(), ExecError> {
    let w = &g.waves[wv];
    let exec = w.exec;
    let base = w.v32(i, i.src[0])?;
    let addr: Box<[u32; LANES]> = Box::new(from_fn(|l| base[l].wrapping_add(i.imm as u32)));
    g.stats.ds_access(i, exec, &addr);
    let effect = match i.op {
        Op::DsBpermuteB32 | Op::DsPermuteB32 => {
            let data = w.v32(i, i.src[1])?;
            let mut value = [0u32; LANES];
            for l in 0..LANES {
                let k = ((addr[l] / 4) % 64) as usize;
                if i.op == Op::DsBpermuteB32 {
                    // Lane l reads lane k's data (inactive source lanes read 0).
                    value[l] = if exec >> k & 1 == 1 { data[k] } else { 0 };
                } else if exec >> l & 1 == 1 {
                    // ds_permute: lane l writes its data to lane k.
                    value[k] = data[l];
                }
            }
            Effect::VgprWrite {
                dst: Wave::data_reg(i, i.dst)?,
                exec,
                value: Box::new(value),
            }
        }
        // Two elements at 8-bit offsets in units of the element (CDNA3 ISA guide, "LDS
        // instructions": DS_READ2_B32, DS_READ2_B64), into consecutive registers.
        Op::DsRead2B32 | Op::DsRead2B64 => {
            let unit = if i.op == Op::DsRead2B64 { 8 } else { 4 };
            let at = |off: i32| -> Box<[u32; LANES]> {
                Box::new(from_fn(|l| base[l].wrapping_add((off as u32) * unit)))
            };
            Effect::LdsLoad2 {
                dst: Wave::data_reg(i, i.dst)?,
                bytes: unit,
                exec,
                addr: [at(i.imm & 0xff), at((i.imm >> 8) & 0xff)],
            }
        }
        // Two elements at 8-bit offsets in units of the element (CDNA3 ISA guide: DS_WRITE2_B32,
        // DS_WRITE2_B64), data0 to the first, data1 to the second.
        Op::DsWrite2B32 | Op::DsWrite2B64 => {
            let unit = if i.op == Op::DsWrite2B64 { 8 } else { 4 };
            let at = |off: i32| -> Box<[u32; LANES]> {
                Box::new(from_fn(|l| base[l].wrapping_add((off as u32) * unit)))
            };
            let n = unit as usize / 4;
            let data = |k: usize| -> Result<Vec<[u32; LANES]>, ExecError> {
                Ok(regs(w, Wave::data_reg(i, i.src[1 + k])?, n))
            };
            Effect::LdsStore2 {
                bytes: unit,
                exec,
                addr: [at(i.imm & 0xff), at((i.imm >> 8) & 0xff)],
                data: [data(0)?, data(1)?],
            }
        }
        Op::DsReadB64TrB16 => Effect::LdsLoadTrB16 {
            dst: Wave::data_reg(i, i.dst)?,
            exec,
            addr,
        },
        op if op.is_store() => {
            let bytes = bytes_of(op);
            let r = Wave::data_reg(i, i.src[1])?;
            Effect::LdsStore {
                bytes,
                exec,
                addr,
                data: regs(w, r, bytes.div_ceil(4) as usize),
            }
        }
        op => Effect::LdsLoad {
            dst: Wave::data_reg(i, i.dst)?,
            bytes: bytes_of(op),
            exec,
            addr,
        },
    };
    g.issue(wv, i, Counter::Lds, effect);
    Ok(())
}

/// The buffer resource (V#) fields a raw buffer access uses.
struct Rsrc {
    base: u64,
    num_records: u32,
}

fn rsrc(w: &Wave, i: &Instr) -> Result<Rsrc, ExecError> {
    let s = i.src[1];
    let d: Vec<u32> = (0..4).map(|k| w.s32(i, s + k)).collect::<Result<_, _>>()?;
    let stride = (d[1] >> 16) & 0x3fff;
    let swizzle = d[1] >> 31 & 1 == 1;
    let add_tid = d[3] >> 23 & 1 == 1;
    if stride != 0 || swizzle || add_tid || i.idxen {
        return Err(ExecError::Launch(format!(
            "buffer resource with stride {stride}, swizzle {swizzle}, add_tid {add_tid}, idxen {}: only raw buffers are emulated",
            i.idxen
        )));
    }
    Ok(Rsrc {
        base: d[0] as u64 | ((d[1] & 0xffff) as u64) << 32,
        num_records: d[2],
    })
}

pub(super) fn mubuf(g: &mut Group, wv: usize, i: &Instr) -> Result<(), ExecError> {
    let w = &g.waves[wv];
    let exec = w.exec;
    let r = rsrc(w, i)?;
    let soff = w.s32(i, i.src[2])?;
    let voff = if i.offen {
        w.v32(i, i.src[0])?
    } else {
        [0; LANES]
    };
    let bytes = bytes_of(i.op);
    let mut lanes: Box<[Lane; LANES]> = Box::new([Lane::Off; LANES]);
    for (l, lane) in lanes.iter_mut().enumerate() {
        if exec >> l & 1 == 0 {
            continue;
        }
        let off = voff[l] as u64 + i.imm as u64;
        let records = r.num_records as u64;
        *lane = if off >= records {
            Lane::Zero
        } else if off + bytes as u64 > records {
            return Err(ExecError::Straddle {
                offset: off,
                bytes,
                num_records: r.num_records,
            });
        } else {
            Lane::At(r.base + off + soff as u64)
        };
    }
    let effect = if i.lds {
        if bytes != 4 && bytes != 16 {
            return Err(ExecError::Unimplemented);
        }
        let m0 = w.m0;
        Effect::GlobalToLds {
            bytes,
            lanes,
            lds: Box::new(from_fn(|l| {
                m0.wrapping_add(i.imm as u32).wrapping_add(l as u32 * bytes)
            })),
        }
    } else if i.op.is_store() {
        let d = Wave::data_reg(i, i.dst)?;
        Effect::GlobalStore {
            bytes,
            lanes,
            data: regs(w, d, bytes.div_ceil(4) as usize),
        }
    } else {
        Effect::GlobalLoad {
            dst: Wave::data_reg(i, i.dst)?,
            bytes,
            lanes,
        }
    };
    g.issue(wv, i, Counter::Vm, effect);
    Ok(())
}

pub(super) fn global(g: &mut Group, wv: usize, i: &Instr) -> Result<(), ExecError> {
    let w = &g.waves[wv];
    let exec = w.exec;
    let bytes = bytes_of(i.op);
    let addr: [u64; LANES] = if i.src[1] == NONE {
        w.v64(i, i.src[0])?
    } else {
        let base = w.s64(i, i.src[1])?;
        let off = w.v32(i, i.src[0])?;
        from_fn(|l| base.wrapping_add(off[l] as u64))
    };
    let lanes: Box<[Lane; LANES]> = Box::new(from_fn(|l| {
        if exec >> l & 1 == 0 {
            Lane::Off
        } else {
            Lane::At(addr[l].wrapping_add(i.imm as i64 as u64))
        }
    }));
    let effect = if i.op.is_store() {
        let d = Wave::data_reg(i, i.dst)?;
        let mut data = regs(w, d, bytes.div_ceil(4) as usize);
        if i.op.name().ends_with("_d16_hi") {
            // The high half of the data register (a bf16 that is an f32's top 16 bits).
            data.iter_mut()
                .for_each(|r| r.iter_mut().for_each(|x| *x >>= 16));
        }
        Effect::GlobalStore { bytes, lanes, data }
    } else {
        Effect::GlobalLoad {
            dst: Wave::data_reg(i, i.dst)?,
            bytes,
            lanes,
        }
    };
    g.issue(wv, i, Counter::Vm, effect);
    Ok(())
}
