//! Memory operations in flight. A load or store is *issued* (addresses computed, store data read
//! from registers) when its instruction executes, and *lands* (memory read or written, destination
//! registers written, its counter decremented) later: at its due time on the workgroup's clock, or
//! earlier when an `s_waitcnt` needs it. CDNA3 ISA guide, "Data Dependency Resolution": vector memory
//! operations return in issue order (VM_CNT), LDS operations in issue order among themselves, scalar
//! memory reads in any order (both LGKM_CNT). Loads read memory when they land, so a consumer that did
//! not wait sees its destination registers unchanged: the stale data a missing wait reads on hardware.

use super::memory::{Lds, Memory};
use super::wave::{Wave, LANES};
use super::ExecError;

/// Which counter an operation is counted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Vm,
    Lds,
    Smem,
}

/// Per lane: where the lane's access goes, or what it does instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Off,
    /// Out of the buffer's range: loads return zero, stores are dropped.
    Zero,
    At(u64),
}

#[derive(Debug, Clone)]
pub enum Effect {
    /// Global (buffer or flat) load of `bytes` per lane into `dwords` VGPRs from `dst`, zero-extended.
    GlobalLoad {
        dst: usize,
        bytes: u32,
        lanes: Box<[Lane; LANES]>,
    },
    GlobalStore {
        bytes: u32,
        lanes: Box<[Lane; LANES]>,
        data: Vec<[u32; LANES]>,
    },
    /// `buffer_load ... lds`: each active lane's bytes go to LDS at its own address.
    GlobalToLds {
        bytes: u32,
        lanes: Box<[Lane; LANES]>,
        lds: Box<[u32; LANES]>,
    },
    LdsLoad {
        dst: usize,
        bytes: u32,
        exec: u64,
        addr: Box<[u32; LANES]>,
    },
    /// `ds_read2_b32` / `ds_read2_b64`: an element of `bytes` at each of the two addresses, the
    /// second into the registers after the first's.
    LdsLoad2 {
        dst: usize,
        bytes: u32,
        exec: u64,
        addr: [Box<[u32; LANES]>; 2],
    },
    /// `ds_read_b64_tr_b16` (CDNA4 ISA guide, "LDS transpose loads"): lane j of each 16-lane group
    /// gets, as its 16-bit element q, element j % 4 of the four consecutive 16-bit values that lane
    /// 4q + j / 4 of the group addresses.
    LdsLoadTrB16 {
        dst: usize,
        exec: u64,
        addr: Box<[u32; LANES]>,
    },
    LdsStore {
        bytes: u32,
        exec: u64,
        addr: Box<[u32; LANES]>,
        data: Vec<[u32; LANES]>,
    },
    /// `ds_write2_b32` / `ds_write2_b64`: data0 at the first address, data1 at the second (one
    /// instruction, one count of the LDS counter).
    LdsStore2 {
        bytes: u32,
        exec: u64,
        addr: [Box<[u32; LANES]>; 2],
        data: [Vec<[u32; LANES]>; 2],
    },
    /// A value computed at issue (ds_bpermute) written to VGPR `dst` when it lands.
    VgprWrite {
        dst: usize,
        exec: u64,
        value: Box<[u32; LANES]>,
    },
    SmemLoad {
        dst: u16,
        dwords: u32,
        addr: u64,
    },
}

#[derive(Debug, Clone)]
pub struct Pending {
    pub due: u64,
    pub effect: Effect,
    /// The issuing instruction's offset (errors at landing name it).
    pub offset: u32,
}

fn write_lane_bytes(w: &mut Wave, dst: usize, lane: usize, buf: &[u8]) {
    let dwords = buf.len().div_ceil(4);
    for d in 0..dwords {
        let mut word = [0u8; 4];
        let n = (buf.len() - 4 * d).min(4);
        word[..n].copy_from_slice(&buf[4 * d..4 * d + n]);
        w.v[dst + d][lane] = u32::from_le_bytes(word);
    }
}

fn lane_bytes(data: &[[u32; LANES]], lane: usize, bytes: u32) -> Vec<u8> {
    let mut out: Vec<u8> = data.iter().flat_map(|r| r[lane].to_le_bytes()).collect();
    out.truncate(bytes as usize);
    out
}

/// What a destination register holds while a load into it is in flight, when the run poisons them
/// ([`super::Options::poison_in_flight`]): a quiet NaN as an f32 and as both of its bf16 halves, and
/// no address inside any buffer, so a read before the load lands shows in the result (or faults)
/// whatever the landing order.
pub const POISON: u32 = 0xffc0_ffc0;

/// Poison the registers `effect` will write when it lands, in the lanes it writes.
pub fn poison(effect: &Effect, w: &mut Wave) {
    let mut rows = |dst: usize, dwords: usize, lane_on: &dyn Fn(usize) -> bool| {
        for r in dst..(dst + dwords).min(w.v.len()) {
            for l in (0..LANES).filter(|&l| lane_on(l)) {
                w.v[r][l] = POISON;
            }
        }
    };
    match effect {
        Effect::GlobalLoad { dst, bytes, lanes } => {
            rows(*dst, bytes.div_ceil(4) as usize, &|l| lanes[l] != Lane::Off)
        }
        Effect::LdsLoad {
            dst, bytes, exec, ..
        } => rows(*dst, bytes.div_ceil(4) as usize, &|l| exec >> l & 1 == 1),
        Effect::LdsLoad2 {
            dst, bytes, exec, ..
        } => rows(*dst, 2 * (*bytes as usize / 4), &|l| exec >> l & 1 == 1),
        Effect::LdsLoadTrB16 { dst, exec, .. } => rows(*dst, 2, &|l| exec >> l & 1 == 1),
        Effect::VgprWrite { dst, exec, .. } => rows(*dst, 1, &|l| exec >> l & 1 == 1),
        Effect::SmemLoad { dst, dwords, .. } => {
            for r in (*dst as usize..*dst as usize + *dwords as usize).filter(|&r| r < 102) {
                w.sgpr[r] = POISON;
            }
        }
        Effect::GlobalStore { .. }
        | Effect::GlobalToLds { .. }
        | Effect::LdsStore { .. }
        | Effect::LdsStore2 { .. } => {}
    }
}

/// `bytes` from LDS at each active lane's address into its registers from `dst`.
fn lds_load(
    w: &mut Wave,
    lds: &Lds,
    dst: usize,
    bytes: u32,
    exec: u64,
    addr: &[u32; LANES],
) -> Result<(), ExecError> {
    let mut buf = vec![0u8; bytes as usize];
    for l in (0..LANES).filter(|l| exec >> l & 1 == 1) {
        lds.read(addr[l], &mut buf)?;
        write_lane_bytes(w, dst, l, &buf);
    }
    Ok(())
}

/// Apply one landed operation.
pub fn land(p: Pending, w: &mut Wave, mem: &mut Memory, lds: &mut Lds) -> Result<(), ExecError> {
    let at = |e: ExecError| ExecError::Landing {
        offset: p.offset,
        source: Box::new(e),
    };
    match p.effect {
        Effect::GlobalLoad { dst, bytes, lanes } => {
            let mut buf = vec![0u8; bytes as usize];
            for (l, lane) in lanes.iter().enumerate() {
                match *lane {
                    Lane::Off => continue,
                    Lane::Zero => buf.fill(0),
                    Lane::At(a) => mem.read(a, &mut buf).map_err(at)?,
                }
                write_lane_bytes(w, dst, l, &buf);
            }
        }
        Effect::GlobalStore { bytes, lanes, data } => {
            for (l, lane) in lanes.iter().enumerate() {
                if let Lane::At(a) = *lane {
                    mem.write(a, &lane_bytes(&data, l, bytes)).map_err(at)?;
                }
            }
        }
        Effect::GlobalToLds {
            bytes,
            lanes,
            lds: la,
        } => {
            let mut buf = vec![0u8; bytes as usize];
            for (l, lane) in lanes.iter().enumerate() {
                match *lane {
                    Lane::Off => continue,
                    Lane::Zero => buf.fill(0),
                    Lane::At(a) => mem.read(a, &mut buf).map_err(at)?,
                }
                lds.write(la[l], &buf).map_err(at)?;
            }
        }
        Effect::LdsLoad {
            dst,
            bytes,
            exec,
            addr,
        } => lds_load(w, lds, dst, bytes, exec, &addr).map_err(at)?,
        Effect::LdsLoad2 {
            dst,
            bytes,
            exec,
            addr,
        } => {
            for (k, a) in addr.iter().enumerate() {
                lds_load(w, lds, dst + k * (bytes as usize / 4), bytes, exec, a).map_err(at)?;
            }
        }
        Effect::LdsLoadTrB16 { dst, exec, addr } => {
            let mut out = [[0u16; 4]; LANES];
            for (l, o) in out.iter_mut().enumerate() {
                let (g0, j) = (l & !15, l & 15);
                for (q, e) in o.iter_mut().enumerate() {
                    let src = g0 + 4 * q + j / 4;
                    let mut b = [0u8; 2];
                    lds.read(addr[src] + 2 * (j % 4) as u32, &mut b)
                        .map_err(at)?;
                    *e = u16::from_le_bytes(b);
                }
            }
            for (l, o) in out.iter().enumerate().filter(|(l, _)| exec >> l & 1 == 1) {
                w.v[dst][l] = o[0] as u32 | (o[1] as u32) << 16;
                w.v[dst + 1][l] = o[2] as u32 | (o[3] as u32) << 16;
            }
        }
        Effect::LdsStore {
            bytes,
            exec,
            addr,
            data,
        } => {
            for l in (0..LANES).filter(|l| exec >> l & 1 == 1) {
                lds.write(addr[l], &lane_bytes(&data, l, bytes))
                    .map_err(at)?;
            }
        }
        Effect::LdsStore2 {
            bytes,
            exec,
            addr,
            data,
        } => {
            for (a, d) in addr.iter().zip(&data) {
                for l in (0..LANES).filter(|l| exec >> l & 1 == 1) {
                    lds.write(a[l], &lane_bytes(d, l, bytes)).map_err(at)?;
                }
            }
        }
        Effect::VgprWrite { dst, exec, value } => {
            for l in (0..LANES).filter(|l| exec >> l & 1 == 1) {
                w.v[dst][l] = value[l];
            }
        }
        Effect::SmemLoad { dst, dwords, addr } => {
            let mut buf = vec![0u8; 4 * dwords as usize];
            mem.read(addr, &mut buf).map_err(at)?;
            for d in 0..dwords as usize {
                let x = u32::from_le_bytes([
                    buf[4 * d],
                    buf[4 * d + 1],
                    buf[4 * d + 2],
                    buf[4 * d + 3],
                ]);
                let r = dst as usize + d;
                if r >= 102 {
                    return Err(at(ExecError::Launch(format!("s_load into s{r}"))));
                }
                w.sgpr[r] = x;
            }
        }
    }
    Ok(())
}
