//! Register budget planner: does a block of producer and consumer waves with a given output tile fit
//! the register file? Reproduces the reasoning of HipKittens Table 2 / §3.3.1: CDNA divides each SIMD's
//! 512 registers statically and evenly among its resident waves, so producer waves cost consumers
//! registers; Hopper lets producers hand registers to consumers (warpgroup register reallocation,
//! PTX `setmaxnreg`).

use crate::GridError;
use kittens_hw::{Arch, Gpu};
use serde::Serialize;

/// One block's shape for the planner. Register counts are 32-bit registers per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RegsInput {
    pub producers: u32,
    pub consumers: u32,
    /// Output tile per block (fp32 accumulators).
    pub tile_m: u32,
    pub tile_n: u32,
    /// Matrix instruction `m × n × k` (e.g. 16×16×32 bf16 on CDNA4).
    pub mma: (u32, u32, u32),
    /// K columns of A and B held in registers per stage (default: the instruction's k).
    pub k_step: u32,
    /// Register stages of A/B fragments (1: load a fragment, use it, load the next).
    pub reg_stages: u32,
    /// Shared-memory pipeline depth: K tiles of `lds_k` staged in LDS.
    pub depth: u32,
    /// K extent of one LDS stage (HipKittens Fig. 21: 64).
    pub lds_k: u32,
    /// Bytes per input element (2 for bf16).
    pub in_bytes: u32,
    /// Per-lane registers for addresses, loop state and softmax-free scalars kept in vector registers.
    pub overhead: u32,
}

/// Which register-file rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegModel {
    /// CDNA: 512 per SIMD split evenly among co-resident waves; one wave per SIMD sees 256 VGPR + 256
    /// AGPR (HipKittens §3.2.1, footnote 1).
    CdnaStatic,
    /// Hopper: producers shrink to a floor and consumers grow, per warpgroup (`setmaxnreg`).
    HopperRealloc,
}

/// What one consumer wave needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsumerNeed {
    /// Consumer waves arranged `rows × cols` over the output tile (the arrangement needing the fewest
    /// operand registers).
    pub layout: (u32, u32),
    /// Each consumer's output sub-tile.
    pub sub_tile: (u32, u32),
    pub accumulators: u32,
    pub operands: u32,
    pub overhead: u32,
    pub total: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegsReport {
    pub gpu: String,
    pub model: RegModel,
    pub waves: u32,
    pub waves_per_simd: u32,
    /// Registers per lane a consumer / producer wave gets.
    pub consumer_budget: u32,
    pub producer_budget: u32,
    pub consumer: ConsumerNeed,
    pub producer_need: u32,
    pub lds_bytes: u64,
    pub lds_limit: u64,
    pub fits: bool,
    pub reason: String,
}

/// Register allocation granule on CDNA (VGPRs are allocated in blocks of 8) and `setmaxnreg`'s step.
const GRANULE: u32 = 8;
/// `setmaxnreg` lower bound for a shrinking warpgroup (PTX ISA, `setmaxnreg`).
const HOPPER_PRODUCER_FLOOR: u32 = 24;

/// Most threads in one block on every GPU modelled (CUDA C++ Programming Guide, compute capability 9.0;
/// HIP's workgroup limit on CDNA): larger blocks cannot launch, so the planner refuses them.
pub const MAX_THREADS_PER_BLOCK: u64 = 1024;
/// Most output elements of one block's tile the planner takes (4096 × 4096): its counts then fit u32.
pub const MAX_TILE_ELEMS: u64 = 1 << 24;

fn round_down(x: u32) -> u32 {
    x / GRANULE * GRANULE
}

/// A register or byte count computed in u64 from u32 inputs, back in u32, or the error naming it.
fn fit32(v: u64, what: &str) -> Result<u32, GridError> {
    u32::try_from(v).map_err(|_| GridError::overflow(format!("{what} ({v})"), 32))
}

impl RegsInput {
    fn validate(&self, lanes: u32) -> Result<(), GridError> {
        let v = [
            self.consumers,
            self.tile_m,
            self.tile_n,
            self.mma.0,
            self.mma.1,
            self.mma.2,
        ];
        if v.contains(&0) || self.k_step == 0 || self.reg_stages == 0 || self.in_bytes == 0 {
            return Err(GridError::Invalid(
                "consumers, tile, instruction, k step, stages must be positive".into(),
            ));
        }
        // A shared-memory pipeline of no stage, or stages of no K, holds nothing to compute from.
        if self.depth == 0 || self.lds_k == 0 {
            return Err(GridError::Invalid(format!(
                "shared-memory depth {} and stage K {} must be positive",
                self.depth, self.lds_k
            )));
        }
        // A register stage feeds whole instructions: its K is a multiple of the instruction's.
        if !self.k_step.is_multiple_of(self.mma.2) {
            return Err(GridError::Invalid(format!(
                "k step {} is not a multiple of the instruction's K {}",
                self.k_step, self.mma.2
            )));
        }
        let threads = (self.producers as u128 + self.consumers as u128) * lanes as u128;
        if threads > MAX_THREADS_PER_BLOCK as u128 {
            return Err(GridError::Invalid(format!(
                "{} producer + {} consumer waves of {lanes} lanes are {threads} threads, over the \
                 {MAX_THREADS_PER_BLOCK} threads a block may have",
                self.producers, self.consumers
            )));
        }
        let elems = self.tile_m as u128 * self.tile_n as u128;
        GridError::check_budget(
            format!("an output tile of {}x{}", self.tile_m, self.tile_n),
            elems,
            "elements",
            "register planner",
            MAX_TILE_ELEMS,
            "",
        )?;
        if !self.tile_m.is_multiple_of(self.mma.0) || !self.tile_n.is_multiple_of(self.mma.1) {
            return Err(GridError::Invalid(format!(
                "output tile {}x{} is not a multiple of the {}x{} instruction",
                self.tile_m, self.tile_n, self.mma.0, self.mma.1
            )));
        }
        Ok(())
    }
}

/// The consumer arrangement with the fewest operand rows+columns whose sub-tiles the instruction tiles.
fn consumer_need(
    s: &RegsInput,
    lanes: u32,
    operands_in_regs: bool,
) -> Result<ConsumerNeed, GridError> {
    let c = s.consumers;
    let layout = (1..=c)
        .filter(|r| c.is_multiple_of(*r))
        .map(|r| (r, c / r))
        .filter(|&(r, q)| {
            s.tile_m.is_multiple_of(r * s.mma.0) && s.tile_n.is_multiple_of(q * s.mma.1)
        })
        .min_by_key(|&(r, q)| s.tile_m / r + s.tile_n / q)
        .ok_or_else(|| {
            GridError::Invalid(format!(
                "{c} consumers cannot tile a {}x{} output",
                s.tile_m, s.tile_n
            ))
        })?;
    let sub = (s.tile_m / layout.0, s.tile_n / layout.1);
    // validate() bounds the tile to 2^24 elements; the rest is counted in u64 and checked.
    let accumulators = (sub.0 * sub.1).div_ceil(lanes);
    let operands = if operands_in_regs {
        let operand_bytes = [s.k_step, s.in_bytes, s.reg_stages]
            .iter()
            .try_fold((sub.0 + sub.1) as u64, |acc, &f| acc.checked_mul(f as u64))
            .ok_or_else(|| GridError::overflow("the operand bytes of a consumer".into(), 64))?;
        fit32(
            operand_bytes.div_ceil(4 * lanes as u64),
            "operand registers of a consumer",
        )?
    } else {
        0
    };
    let total = fit32(
        accumulators as u64 + operands as u64 + s.overhead as u64,
        "registers of a consumer",
    )?;
    Ok(ConsumerNeed {
        layout,
        sub_tile: sub,
        accumulators,
        operands,
        overhead: s.overhead,
        total,
    })
}

/// Plan the register budget of one block on `gpu`.
pub fn plan_regs(gpu: &Gpu, s: &RegsInput) -> Result<RegsReport, GridError> {
    let lanes = gpu.wave_width;
    s.validate(lanes)?;
    let waves = s.producers + s.consumers;
    let simds = gpu.simds_per_cu;
    let waves_per_simd = waves.div_ceil(simds);
    let lds_bytes = [s.depth, s.lds_k, s.in_bytes]
        .iter()
        .try_fold(s.tile_m as u64 + s.tile_n as u64, |acc, &f| {
            acc.checked_mul(f as u64)
        })
        .ok_or_else(|| GridError::overflow("the LDS bytes of a block".into(), 64))?;
    let lds_limit = gpu.shared_bytes_per_block as u64;
    let model = if gpu.arch == Arch::Hopper {
        RegModel::HopperRealloc
    } else {
        RegModel::CdnaStatic
    };
    // Hopper's wgmma reads A and B from shared memory; CDNA's MFMA reads them from registers.
    let consumer = consumer_need(s, lanes, model == RegModel::CdnaStatic)?;
    let producer_need = s.overhead;
    let (consumer_budget, producer_budget, split_ok, why) = match model {
        RegModel::CdnaStatic => {
            let b = round_down(gpu.regs_per_lane_per_simd / waves_per_simd)
                .min(gpu.max_regs_per_thread);
            let mut why =
                format!("{waves} waves, {waves_per_simd} per SIMD: every wave gets {b} of 512");
            if s.producers > 0 {
                why += &format!(", the {} producers included", s.producers);
            }
            // One wave per SIMD: accumulators may live in AGPRs, but A/B operands and addresses must sit
            // in the 256 VGPRs (HIPCC does not feed MFMA from AGPRs, HipKittens §3.2.1).
            let split_ok = match (waves_per_simd, gpu.vgpr_agpr_split) {
                (1, Some((v, _))) => consumer.operands + consumer.overhead <= v,
                _ => true,
            };
            (b, b, split_ok, why)
        }
        RegModel::HopperRealloc => {
            let total = gpu.regs_per_lane_per_simd * simds * lanes;
            let p = if s.producers > 0 {
                HOPPER_PRODUCER_FLOOR
            } else {
                0
            };
            let free = total - s.producers * lanes * p;
            let c = round_down(free / (s.consumers * lanes)).min(gpu.max_regs_per_thread);
            (
                c,
                p,
                true,
                format!(
                    "{waves} warps: producers shrink to {p}, consumers grow to {c} (setmaxnreg)"
                ),
            )
        }
    };
    let fits = consumer.total <= consumer_budget
        && (s.producers == 0 || producer_need <= producer_budget)
        && split_ok
        && lds_bytes <= lds_limit;
    let mut reason = format!(
        "{} — {why}; a consumer needs {} ({} accumulators + {} operands + {} overhead)",
        if fits { "fits" } else { "does not fit" },
        consumer.total,
        consumer.accumulators,
        consumer.operands,
        consumer.overhead
    );
    if !split_ok {
        reason += "; operands and addresses exceed the 256 VGPRs of the one-wave split";
    }
    if lds_bytes > lds_limit {
        reason += &format!("; LDS {lds_bytes} B exceeds {lds_limit} B");
    }
    Ok(RegsReport {
        gpu: gpu.name.to_string(),
        model,
        waves,
        waves_per_simd,
        consumer_budget,
        producer_budget,
        consumer,
        producer_need,
        lds_bytes,
        lds_limit,
        fits,
        reason,
    })
}
