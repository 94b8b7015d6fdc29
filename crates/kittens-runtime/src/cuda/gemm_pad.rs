//! GEMM operands TMA cannot describe, and the explicit padded copy that makes them describable.
//!
//! A TMA map needs a 16-byte aligned base and a row pitch that is a multiple of 16 bytes (CUDA driver
//! API, `cuTensorMapEncodeTiled`): a bf16 matrix whose row length is no multiple of 8 (K of A and B,
//! N of C), or a view that starts mid-row, has neither. Such an operand is copied on the stream into a
//! scratch matrix with the row length rounded up to 8 elements (`cuMemcpy2DAsync`, one pitched copy),
//! and C back out of one. Only the copied rows' first `cols` elements are ever read: the tensor maps
//! keep the logical extents, and TMA reads columns past them as zero, so the scratch needs no
//! clearing. The copies cost one extra read and write of each padded operand; the benchmark times
//! them with the kernel and reports them on their own as well.

use cudarc::driver::sys as cu;

use std::rc::Rc;

use super::driver::{check, Device, Stream};
use super::strip_kernel::StripKernel;
use super::CudaError;
use kittens_ir::SlotFill;
use kittens_kernels::gemm::shapes::copies_misaligned;

/// A row-major bf16 matrix in device memory: `rows × cols`, rows `pitch` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mat {
    pub ptr: u64,
    pub rows: usize,
    pub cols: usize,
    pub pitch: usize,
}

impl Mat {
    /// A dense matrix (pitch = cols).
    pub fn dense(ptr: u64, rows: usize, cols: usize) -> Mat {
        Mat {
            ptr,
            rows,
            cols,
            pitch: cols,
        }
    }

    /// Whether a TMA map can address it in place: 16-byte aligned base, pitch a multiple of 16 bytes.
    pub fn tma_ok(&self) -> bool {
        self.ptr.is_multiple_of(16) && (self.pitch * 2).is_multiple_of(16)
    }

    /// The same extents with the row pitch TMA needs (`cols` rounded up to 8), at `ptr`.
    pub fn padded_at(&self, ptr: u64) -> Mat {
        Mat {
            ptr,
            rows: self.rows,
            cols: self.cols,
            pitch: padded_cols(self.cols),
        }
    }

    /// Bytes of a scratch matrix holding [`Mat::padded_at`].
    pub fn padded_bytes(&self) -> Result<usize, CudaError> {
        self.rows
            .checked_mul(padded_cols(self.cols))
            .and_then(|x| x.checked_mul(2))
            .ok_or_else(|| {
                CudaError::Invalid(format!(
                    "padded copy of a {} x {} matrix overflows",
                    self.rows, self.cols
                ))
            })
    }
}

/// `cols` rounded up to a multiple of 64 bf16 (128 bytes): TMA needs 16-byte rows, but rows that start
/// on 128-byte lines load faster (H100: 3000x3000x3008, whose A and B rows are 6016 = 47·128 bytes,
/// ran at 0.756 of cuBLAS where 3000³ ran at 0.416, docs/performance.md), at the same bytes copied.
pub fn padded_cols(cols: usize) -> usize {
    cols.div_ceil(64) * 64
}

/// Which operands of `C = A·B` go through a padded copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PadPlan {
    pub a: bool,
    pub b: bool,
    pub c: bool,
}

impl PadPlan {
    pub fn of(a: &Mat, b: &Mat, c: &Mat) -> PadPlan {
        PadPlan {
            a: !a.tma_ok(),
            b: !b.tma_ok(),
            c: !c.tma_ok(),
        }
    }
    pub fn any(&self) -> bool {
        self.a || self.b || self.c
    }

    /// [`PadPlan::of`], plus B copied into 128-byte aligned rows where TMA could read it in place but
    /// its rows start off 128-byte lines, in a GEMM of `m × n` outputs whose operand rows serve
    /// enough outputs for the copy to pay (`kittens_kernels::gemm::shapes::copies_misaligned`,
    /// which the block choice also reads). A stays in place: with the 128-byte L2 promotion its maps
    /// then get (`driver::l2_promotion`) reading A off its lines cost the kernel about 2 µs at 3000³ on
    /// the H100, against 12 to copy it, while B off its lines cost about 28 (0.852 of cuBLAS for B
    /// copied, 0.767 for both, 0.666 for A alone: docs/performance.md, "gemm_bf16").
    pub fn aligned(a: &Mat, b: &Mat, c: &Mat, mn: (usize, usize)) -> PadPlan {
        PadPlan {
            a: PadPlan::of(a, b, c).a,
            ..PadPlan::both_aligned(a, b, c, mn)
        }
    }

    /// The default launch ([`OperandLoads::Auto`]) and its cluster: [`PadPlan::aligned`], except that
    /// a B which TMA can address but whose rows start off 128-byte lines, where that rule copies it,
    /// stays in place and the kernel runs in clusters of two row tiles that multicast each B box
    /// (`GemmConfig::cluster`): half the L2 requests for the rows that straddle two lines, and no
    /// copy (docs/performance.md, "gemm_bf16"). Not for blocks of 64 rows (`tile_rows`): 5000³ ran
    /// 0.68 of cuBLAS so against 0.83 copied. On aligned rows clusters measured 1-6% slower.
    pub fn auto(a: &Mat, b: &Mat, c: &Mat, mn: (usize, usize), tile_rows: u32) -> (PadPlan, u32) {
        let plan = PadPlan::aligned(a, b, c, mn);
        if plan.b && !PadPlan::of(a, b, c).b && tile_rows >= 128 {
            (PadPlan { b: false, ..plan }, 2)
        } else {
            (plan, 1)
        }
    }

    /// [`PadPlan::aligned`] with A copied under the same rule as B (for measurement).
    pub fn both_aligned(a: &Mat, b: &Mat, c: &Mat, (m, n): (usize, usize)) -> PadPlan {
        let plan = PadPlan::of(a, b, c);
        let reuse = copies_misaligned(m as u64, n as u64);
        let off_line = |x: &Mat| !(x.pitch * 2).is_multiple_of(128);
        PadPlan {
            a: plan.a || (reuse && off_line(a)),
            b: plan.b || (reuse && off_line(b)),
            c: plan.c,
        }
    }
}

/// How a launch reads A and B whose rows start off 128-byte lines (`--loads` of the benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OperandLoads {
    /// TMA as [`PadPlan::auto`] plans it: B off 128-byte lines read in place by clusters of two
    /// (multicast), what TMA cannot address copied. On the H100 TMA beat `cp.async` in place at every
    /// shape measured (3000³ 0.76 against 0.53 of cuBLAS, 3072³ 0.98 against 0.70; docs/performance.md).
    Auto,
    /// TMA, from aligned copies where [`PadPlan::aligned`] makes them (B only).
    TmaCopy,
    /// For measurement: A and B copied under that rule ([`PadPlan::both_aligned`]).
    TmaCopyBoth,
    /// For measurement: A copied under that rule, B read in place wherever TMA can.
    TmaCopyA,
    /// For measurement: TMA in place wherever it can read (no copy for rows off 128-byte lines).
    TmaInPlace,
    /// The kernel's own `cp.async` copies from A and B in place (16-byte aligned dense rows only);
    /// C as TMA needs it ([`PadPlan::of`]).
    CpAsync,
}

impl std::str::FromStr for OperandLoads {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(OperandLoads::Auto),
            "tma-copy" => Ok(OperandLoads::TmaCopy),
            "tma-copy-both" => Ok(OperandLoads::TmaCopyBoth),
            "tma-copy-a" => Ok(OperandLoads::TmaCopyA),
            "tma-in-place" => Ok(OperandLoads::TmaInPlace),
            "cp-async" => Ok(OperandLoads::CpAsync),
            o => Err(format!(
                "loads `{o}`: auto, tma-copy, tma-copy-both, tma-copy-a, tma-in-place or cp-async"
            )),
        }
    }
}

impl OperandLoads {
    /// The suffix of a benchmark row's block name for the measurement-only copy choices.
    pub fn copies(self) -> Option<&'static str> {
        match self {
            OperandLoads::TmaCopyBoth => Some("/copy-both"),
            OperandLoads::TmaCopyA => Some("/copy-a"),
            OperandLoads::TmaInPlace => Some("/in-place"),
            _ => None,
        }
    }

    /// The kernel's slot fill, the copies made around it for `C = A·B` of `m × n` outputs, and the
    /// kernel's cluster (1 but for `Auto`, [`PadPlan::auto`], blocks of `tile_rows`). An error where
    /// `CpAsync` cannot read A or B in place.
    pub fn resolve(
        self,
        a: &Mat,
        b: &Mat,
        c: &Mat,
        mn: (usize, usize),
        tile_rows: u32,
    ) -> Result<(SlotFill, PadPlan, u32), CudaError> {
        let of = PadPlan::of(a, b, c);
        let both = PadPlan::both_aligned(a, b, c, mn);
        let in_place = !of.a && !of.b && a.pitch == a.cols && b.pitch == b.cols;
        let tma = |p: PadPlan| Ok((SlotFill::Tma, p, 1));
        match self {
            OperandLoads::Auto => {
                let (p, cluster) = PadPlan::auto(a, b, c, mn, tile_rows);
                Ok((SlotFill::Tma, p, cluster))
            }
            OperandLoads::TmaCopy => tma(PadPlan { a: of.a, ..both }),
            OperandLoads::TmaCopyBoth => tma(both),
            OperandLoads::TmaCopyA => tma(PadPlan { b: of.b, ..both }),
            OperandLoads::TmaInPlace => tma(of),
            OperandLoads::CpAsync if in_place => Ok((SlotFill::CpAsync, of, 1)),
            OperandLoads::CpAsync => Err(CudaError::Invalid(format!(
                "cp.async loads read dense A and B with 16-byte aligned rows: A {}x{} pitch {}, B {}x{} pitch {}",
                a.rows, a.cols, a.pitch, b.rows, b.cols, b.pitch
            ))),
        }
    }
}

/// Enqueues the copy of `src`'s `rows × cols` into `dst` (same extents, other pitch) on `stream`.
///
/// # Safety
/// Both matrices must lie inside live device allocations until the copy has run, and must not overlap.
pub unsafe fn copy(dst: &Mat, src: &Mat, stream: cu::CUstream) -> Result<(), CudaError> {
    check_copy(dst, src)?;
    let p = descriptor(dst, src);
    // SAFETY: the descriptor names device ranges the caller keeps alive (see above).
    check(
        unsafe { cu::cuMemcpy2DAsync_v2(&p, stream) },
        "cuMemcpy2DAsync",
    )
}

/// The padded copy as a kernel (`kittens_kernels::gemm::align`): the driver's pitched copy
/// moved A and B of 3000³ at about 1.4 TB/s on the H100, a strip program streams at the DRAM's rate.
pub struct CopyKernel(StripKernel);

/// The copy's tile program on 32-lane waves: this launcher's and `kittens.matmul`'s (`super::caller`).
pub(crate) fn copy_program() -> Result<kittens_ir::Kernel, CudaError> {
    kittens_kernels::gemm::align::build_copy(32).map_err(|e| CudaError::Invalid(e.to_string()))
}

impl CopyKernel {
    pub fn load(dev: &Rc<Device>) -> Result<CopyKernel, CudaError> {
        Ok(CopyKernel(StripKernel::load(dev, &copy_program()?)?))
    }

    /// Enqueues the copy of `src`'s `rows × cols` into `dst` (same extents, other pitch).
    ///
    /// # Safety
    /// As [`copy`]: both matrices inside live device allocations until the copy has run, not
    /// overlapping.
    pub unsafe fn copy(&self, dst: &Mat, src: &Mat, stream: &Stream) -> Result<(), CudaError> {
        check_copy(dst, src)?;
        let int =
            |x: usize| i64::try_from(x).map_err(|_| CudaError::Invalid(format!("copy extent {x}")));
        self.0.launch(
            stream,
            &[
                ("rows", int(src.rows)?),
                ("cols", int(src.cols)?),
                ("src_pitch", int(src.pitch)?),
                ("dst_pitch", int(dst.pitch)?),
            ],
            &[("src", src.ptr), ("dst", dst.ptr)],
        )
    }
}

fn check_copy(dst: &Mat, src: &Mat) -> Result<(), CudaError> {
    if (dst.rows, dst.cols) != (src.rows, src.cols) || dst.pitch < dst.cols || src.pitch < src.cols
    {
        return Err(CudaError::Invalid(format!(
            "pitched copy of {}x{} (pitch {}) into {}x{} (pitch {})",
            src.rows, src.cols, src.pitch, dst.rows, dst.cols, dst.pitch
        )));
    }
    Ok(())
}

/// The `cuMemcpy2DAsync` descriptor of a device-to-device copy of `src`'s rows into `dst`. Every field
/// is written: the memory-type enum has no zero value, so a zeroed descriptor is not a valid value.
fn descriptor(dst: &Mat, src: &Mat) -> cu::CUDA_MEMCPY2D {
    cu::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src.ptr,
        srcArray: std::ptr::null_mut(),
        srcPitch: src.pitch * 2,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst.ptr,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst.pitch * 2,
        WidthInBytes: src.cols * 2,
        Height: src.rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense A (M×K), B (N×K) and C (M×N) at aligned addresses.
    fn mats(m: usize, n: usize, k: usize) -> (Mat, Mat, Mat) {
        (
            Mat::dense(0x1000, m, k),
            Mat::dense(0x100000, n, k),
            Mat::dense(0x200000, m, n),
        )
    }

    /// The copy's descriptor is built without touching the driver (a zeroed one aborted the first
    /// padded launch on the H100: the memory-type enum has no zero value).
    #[test]
    fn copy_descriptor_names_both_pitches() {
        let src = Mat::dense(0x1000, 3, 13);
        let dst = src.padded_at(0x8000);
        let d = descriptor(&dst, &src);
        assert_eq!(
            (d.srcPitch, d.dstPitch, d.WidthInBytes, d.Height),
            (26, 128, 26, 3)
        );
        assert_eq!((d.srcDevice, d.dstDevice), (0x1000, 0x8000));
        assert_eq!(d.dstMemoryType, cu::CUmemorytype::CU_MEMORYTYPE_DEVICE);
    }

    #[test]
    fn which_operands_need_a_copy() {
        let (m, n, k) = (100, 1000, 777);
        let a = Mat::dense(0x1000, m, k);
        let b = Mat::dense(0x100000, n, k);
        let c = Mat::dense(0x200000, m, n);
        assert_eq!(
            PadPlan::of(&a, &b, &c),
            PadPlan {
                a: true,
                b: true,
                c: false
            }
        );
        assert_eq!(a.padded_at(0x4000).pitch, 832);
        assert_eq!(a.padded_bytes().unwrap(), 100 * 832 * 2);
        // A view starting one element into its allocation is misaligned whatever its pitch.
        let view = Mat::dense(0x1002, m, 1024);
        assert!(!view.tma_ok() && Mat::dense(0x1000, m, 1024).tma_ok());
        assert!(!PadPlan::of(&Mat::dense(0x1000, 8, 8), &b.padded_at(0x1000), &c).any());
        assert!(Mat::dense(0, usize::MAX / 2, 9).padded_bytes().is_err());
    }

    /// 3000³: rows of 6000 bytes are TMA-addressable but off 128-byte lines, so B is copied (A is
    /// read in place, C is not copied: its stores are not the bottleneck); a decode-sized M does not
    /// pay for the copy, and rows of whole lines never need one.
    #[test]
    fn misaligned_rows_are_copied_where_reuse_pays() {
        let (a, b, c) = mats(3000, 3000, 3000);
        assert!(!PadPlan::of(&a, &b, &c).any());
        let ab = PadPlan {
            a: true,
            b: true,
            c: false,
        };
        assert_eq!(PadPlan::both_aligned(&a, &b, &c, (3000, 3000)), ab);
        assert_eq!(
            PadPlan::aligned(&a, &b, &c, (3000, 3000)),
            PadPlan { a: false, ..ab }
        );
        let (a, b, c) = mats(16, 4096, 3000);
        assert!(!PadPlan::aligned(&a, &b, &c, (16, 4096)).any());
        let (a, b, c) = mats(3000, 3000, 3008);
        assert!(!PadPlan::aligned(&a, &b, &c, (3000, 3000)).any());
    }

    /// `auto` is TMA with B in place and clusters of two where its copy would pay (3000³; `tma-copy`
    /// copies it there), none where rows are aligned
    /// (3008) or reuse does not pay (M = 16), and copies where TMA cannot address the rows at all
    /// (K = 777); `cp-async` reads 16-byte aligned dense rows in place and refuses the last.
    #[test]
    fn auto_loads_copy_for_tma_and_cp_async_reads_in_place() {
        let go = |l: OperandLoads, (m, n, k)| {
            let (a, b, c) = mats(m, n, k);
            l.resolve(&a, &b, &c, (m, n), 128)
        };
        let none = PadPlan::default();
        let ab = PadPlan {
            a: true,
            b: true,
            c: false,
        };
        let b_only = PadPlan { a: false, ..ab };
        let cube = (3000, 3000, 3000);
        assert_eq!(
            go(OperandLoads::Auto, cube).unwrap(),
            (SlotFill::Tma, none, 2),
            "B off its lines in place, multicast by clusters of two"
        );
        assert_eq!(
            go(OperandLoads::TmaCopy, cube).unwrap(),
            (SlotFill::Tma, b_only, 1)
        );
        assert_eq!(
            go(OperandLoads::TmaCopyA, cube).unwrap(),
            (SlotFill::Tma, PadPlan { b: false, ..ab }, 1)
        );
        assert_eq!(
            go(OperandLoads::TmaCopyBoth, cube).unwrap(),
            (SlotFill::Tma, ab, 1)
        );
        assert_eq!(
            go(OperandLoads::TmaInPlace, cube).unwrap(),
            (SlotFill::Tma, none, 1)
        );
        assert_eq!(
            go(OperandLoads::CpAsync, cube).unwrap(),
            (SlotFill::CpAsync, none, 1)
        );
        let aligned = (3000, 3000, 3008);
        assert_eq!(
            go(OperandLoads::Auto, aligned).unwrap(),
            (SlotFill::Tma, none, 1)
        );
        assert_eq!(
            go(OperandLoads::Auto, (16, 4096, 3000)).unwrap(),
            (SlotFill::Tma, none, 1)
        );
        // K = 777: rows TMA cannot address are copied, and the copies are aligned: no clusters.
        let odd = (3000, 1000, 777);
        assert_eq!(go(OperandLoads::Auto, odd).unwrap(), (SlotFill::Tma, ab, 1));
        assert!(go(OperandLoads::CpAsync, odd).is_err());
        // Blocks of 64 rows copy B instead of running in clusters.
        let (a, b, c) = mats(5000, 5000, 5000);
        assert_eq!(
            OperandLoads::Auto
                .resolve(&a, &b, &c, (5000, 5000), 64)
                .unwrap(),
            (SlotFill::Tma, b_only, 1)
        );
        assert_eq!("cp-async".parse(), Ok(OperandLoads::CpAsync));
        assert!("tma".parse::<OperandLoads>().is_err());
    }
}
