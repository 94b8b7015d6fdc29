//! TMA tensor maps (`cuTensorMapEncodeTiled`, CUDA Driver API §6.29 "Tensor Map Object Management"):
//! the typed 2-D maps the GEMM launches make and the encoding every registry kernel's launch uses.

use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::sys as cu;

use super::{check, DeviceBuffer};
use crate::cuda::limits::check_tensor_map_2d;
use crate::cuda::CudaError;

/// A TMA tensor map (128 bytes, 64-byte aligned), passed to kernels by value as a
/// `const __grid_constant__` parameter. It holds the address of the buffer it was made over, so it
/// borrows that buffer: the map cannot outlive it (the buffer cannot be dropped, freeing the memory,
/// while a map that names it is alive).
///
/// ```compile_fail,E0515
/// use kittens_runtime::cuda::{driver::Swizzle, Device, TensorMap};
/// fn dangling(dev: &std::rc::Rc<Device>) -> TensorMap<'static> {
///     let buf = dev.alloc(64 * 64 * 2).unwrap();
///     TensorMap::bf16_2d(&buf, 64, 64, 64, 64, Swizzle::B128).unwrap()
/// } // `buf` is freed here while the returned map would still point at it: rejected.
/// ```
///
/// The same code with the buffer owned by the caller compiles:
///
/// ```no_run
/// use kittens_runtime::cuda::{driver::Swizzle, DeviceBuffer, TensorMap};
/// fn map(buf: &DeviceBuffer) -> TensorMap<'_> {
///     TensorMap::bf16_2d(buf, 64, 64, 64, 64, Swizzle::B128).unwrap()
/// }
/// ```
#[derive(Clone, Copy)]
#[repr(C)]
pub struct TensorMap<'buf> {
    pub map: cu::CUtensorMap,
    buffer: PhantomData<&'buf DeviceBuffer>,
}

// The kernel receives the map's bytes: the lifetime marker adds none.
const _: () = assert!(
    std::mem::size_of::<TensorMap<'static>>() == std::mem::size_of::<cu::CUtensorMap>()
        && std::mem::align_of::<TensorMap<'static>>() == std::mem::align_of::<cu::CUtensorMap>()
);

/// Shared-memory swizzle of a TMA box (CUDA Driver API `CUtensorMapSwizzle`): the box's rows must span
/// at most that many bytes, and the kernel's wgmma descriptors must name the same mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swizzle {
    None,
    B32,
    B64,
    B128,
}

impl<'buf> TensorMap<'buf> {
    /// A 2-D bf16 row-major tensor of `rows` × `cols` (`cols` contiguous) at `buf`, read in boxes of
    /// `box_rows` × `box_cols`. Out-of-bounds elements of a box read as zero. The shape is checked
    /// against the buffer and the driver's limits first ([`check_tensor_map_2d`]).
    pub fn bf16_2d(
        buf: &'buf DeviceBuffer,
        rows: u64,
        cols: u64,
        box_rows: u32,
        box_cols: u32,
        swizzle: Swizzle,
    ) -> Result<TensorMap<'buf>, CudaError> {
        check_tensor_map_2d(rows, cols, box_rows, box_cols, buf.bytes())?;
        // Bytes between rows; the innermost stride is implied.
        Self::encode(
            buf,
            &[cols, rows],
            &[cols * 2],
            &[box_cols, box_rows],
            swizzle,
        )
    }

    /// A 2-D row-major tensor of fp8 bytes (`rows` × `cols`, `cols` contiguous, so `cols` a multiple
    /// of 16), as [`Self::bf16_2d`]: TMA copies bytes, the wgmma reading them names the format.
    pub fn fp8_2d(
        buf: &'buf DeviceBuffer,
        rows: u64,
        cols: u64,
        box_rows: u32,
        box_cols: u32,
        swizzle: Swizzle,
    ) -> Result<TensorMap<'buf>, CudaError> {
        crate::cuda::limits::check_tensor_map_2d_of(
            rows,
            cols,
            box_rows,
            box_cols,
            1,
            buf.bytes(),
        )?;
        Ok(TensorMap {
            map: encode_tiled(
                buf.ptr(),
                MapType::Bytes,
                &[cols, rows],
                &[cols],
                &[box_cols, box_rows],
                swizzle,
            )?,
            buffer: PhantomData,
        })
    }

    /// A bf16 tensor of up to 5 dimensions at `buf`: `dims` innermost first (the first has unit
    /// stride), `strides` the byte strides of the others, read in boxes of `boxes` elements. What a
    /// `[b, h, s, d]` attention tensor in BSHD or BHSD order needs (one map, any strides). Checked
    /// first ([`crate::cuda::limits::check_tensor_map_nd`]): within the driver's limits and inside `buf`.
    pub fn bf16_nd(
        buf: &'buf DeviceBuffer,
        dims: &[u64],
        strides: &[u64],
        boxes: &[u32],
        swizzle: Swizzle,
    ) -> Result<TensorMap<'buf>, CudaError> {
        crate::cuda::limits::check_tensor_map_nd(dims, strides, boxes, 2, buf.bytes())?;
        Self::encode(buf, dims, strides, boxes, swizzle)
    }

    fn encode(
        buf: &'buf DeviceBuffer,
        dims: &[u64],
        strides: &[u64],
        boxes: &[u32],
        swizzle: Swizzle,
    ) -> Result<TensorMap<'buf>, CudaError> {
        Ok(TensorMap {
            map: encode_bf16(buf.ptr(), dims, strides, boxes, swizzle)?,
            buffer: PhantomData,
        })
    }
}

impl Swizzle {
    /// The mode of a swizzle span in bytes (0, 32, 64, 128), as the lowering states it.
    pub fn from_bytes(bytes: u32) -> Result<Swizzle, CudaError> {
        match bytes {
            0 => Ok(Swizzle::None),
            32 => Ok(Swizzle::B32),
            64 => Ok(Swizzle::B64),
            128 => Ok(Swizzle::B128),
            s => Err(CudaError::Invalid(format!("TMA swizzle of {s} bytes"))),
        }
    }
}

/// `cuTensorMapEncodeTiled` for a bf16 tensor at device address `ptr` (`dims` innermost first, byte
/// `strides` of the outer dimensions, `boxes` in elements). Shapes are the caller's to check against
/// the memory behind `ptr`: [`TensorMap`] checks them against its buffer, the launcher on caller-owned
/// memory against the allocation the driver reports.
pub(crate) fn encode_bf16(
    ptr: u64,
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
    swizzle: Swizzle,
) -> Result<cu::CUtensorMap, CudaError> {
    encode_tiled(ptr, MapType::Bf16, dims, strides, boxes, swizzle)
}

/// The element type a tensor map is encoded with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapType {
    Bf16,
    /// One byte per element (fp8).
    Bytes,
    /// f32 (the attention backward's dQ accumulator, added into by TMA reductions).
    F32,
}

impl MapType {
    /// The map type of a tile program's tensor of `dtype`.
    pub(crate) fn of(dtype: kittens_hw::dtype::DType) -> Result<MapType, CudaError> {
        use kittens_hw::dtype::DType;
        match dtype {
            DType::Bf16 => Ok(MapType::Bf16),
            DType::Fp8E4m3 => Ok(MapType::Bytes),
            DType::F32 => Ok(MapType::F32),
            d => Err(CudaError::Invalid(format!(
                "a tensor map of {d:?} elements"
            ))),
        }
    }

    /// Bytes per element.
    pub(crate) fn bytes(self) -> u64 {
        match self {
            MapType::Bf16 => 2,
            MapType::Bytes => 1,
            MapType::F32 => 4,
        }
    }
}

/// The L2 fill size TMA asks for (the driver's `CUtensorMapL2promotion`): 256 bytes where the base and
/// every row pitch lie on 128-byte lines, 128 where they do not. Rows off their lines straddle two
/// lines per box row, and with 256-byte promotion the GEMM at 3000³ on the H100 ran 0.734 of cuBLAS
/// reading A in place against 0.852 with 128 (0.538 against 0.627 with both in place; 3072³ alike
/// under either): docs/performance.md, "gemm_bf16". `KITTENS_TMA_L2_PROMOTION` (`none`, `64`, `128`,
/// `256`) overrides the rule for measurement (read once).
fn l2_promotion(ptr: u64, strides: &[u64]) -> cu::CUtensorMapL2promotion_enum {
    use cu::CUtensorMapL2promotion_enum as P;
    static FORCED: std::sync::OnceLock<Option<P>> = std::sync::OnceLock::new();
    let forced =
        FORCED.get_or_init(
            || match std::env::var("KITTENS_TMA_L2_PROMOTION").as_deref() {
                Ok("none") => Some(P::CU_TENSOR_MAP_L2_PROMOTION_NONE),
                Ok("64") => Some(P::CU_TENSOR_MAP_L2_PROMOTION_L2_64B),
                Ok("128") => Some(P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B),
                Ok("256") => Some(P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B),
                _ => None,
            },
        );
    forced.unwrap_or(if on_lines(ptr, strides) {
        P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B
    } else {
        P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B
    })
}

/// Whether a map's base and row pitches (bytes) all lie on 128-byte lines.
fn on_lines(ptr: u64, strides: &[u64]) -> bool {
    ptr.is_multiple_of(128) && strides.iter().all(|s| s.is_multiple_of(128))
}

/// [`encode_bf16`] for either element type.
pub(crate) fn encode_tiled(
    ptr: u64,
    ty: MapType,
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
    swizzle: Swizzle,
) -> Result<cu::CUtensorMap, CudaError> {
    use cu::CUtensorMapSwizzle_enum as S;
    let sw = match swizzle {
        Swizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let rank = dims.len();
    if !(1..=5).contains(&rank) || strides.len() + 1 != rank || boxes.len() != rank {
        return Err(CudaError::Invalid(format!(
            "tensor map of rank {rank} with {} strides and {} box sides",
            strides.len(),
            boxes.len()
        )));
    }
    let elem = [1u32; 5];
    // SAFETY: zeroed storage is a valid bit pattern for the opaque struct, filled by the driver.
    let mut map: cu::CUtensorMap = unsafe { std::mem::zeroed() };
    // SAFETY: arrays of `rank` entries (strides rank-1), checked above, valid for the call; the
    // address is device memory (the caller's to check).
    check(
        unsafe {
            cu::cuTensorMapEncodeTiled(
                &mut map,
                match ty {
                    MapType::Bf16 => cu::CUtensorMapDataType_enum::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                    MapType::Bytes => cu::CUtensorMapDataType_enum::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                    MapType::F32 => cu::CUtensorMapDataType_enum::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                },
                rank as u32,
                ptr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem.as_ptr(),
                cu::CUtensorMapInterleave_enum::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sw,
                l2_promotion(ptr, strides),
                cu::CUtensorMapFloatOOBfill_enum::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        },
        "cuTensorMapEncodeTiled",
    )?;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::on_lines;

    /// 3000 bf16 per row is 6000 bytes: 16-byte aligned (TMA can address it) but off 128-byte
    /// lines, so such a map asks for 128-byte promotion; 3008 per row (6016 bytes) lies on them.
    #[test]
    fn maps_off_128_byte_lines_are_told_apart() {
        assert!(on_lines(1 << 20, &[3008 * 2]));
        assert!(!on_lines(1 << 20, &[3000 * 2]));
        assert!(!on_lines((1 << 20) + 16, &[3008 * 2]));
        assert!(on_lines(1 << 20, &[]));
        assert!(!on_lines(1 << 20, &[4096 * 2, 3000 * 2]));
    }
}
