//! Launching on memory, streams and contexts a framework owns (PyTorch's tensors and current stream):
//! lowered kernels on raw device pointers, enqueued on the caller's stream, in the device's primary
//! context — the context the CUDA runtime, and so PyTorch, uses (CUDA driver API §"Primary
//! Context Management"). Nothing here allocates, copies or synchronises, so a launch can be captured
//! into a CUDA graph once the kernel is loaded.
//!
//! This module holds what every such launcher shares — the retained contexts, pointer checks, and the
//! per-device cache of loaded kernels keyed by kernel configuration — and the GEMM on it; the attention
//! forward is in [`super::caller_attn`]. A kernel is compiled (NVRTC, on-disk cache: [`super::nvrtc`])
//! and loaded on first use per device and configuration, and kept for the life of the process; the
//! primary context is retained once and never released, so the loaded modules stay valid whatever the
//! framework does with its own reference.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::sys as cu;
use kittens_codegen::Lowered;
use kittens_kernels::gemm::shapes::{self, HopperTile};
use kittens_kernels::gemm::BLayout;

use super::driver::check;
use super::gemm_kernel::{gemm_maps, mat_map, GemmArgs};
use super::gemm_pad::{self, Mat, PadPlan};
use super::{compile, invalid, CudaCompileReport, CudaError};

/// Where the kernel comes from: `gemm_bf16` with a given block, B layout and cluster, lowered for
/// sm_90a (`super::gemm_kernel::lower_tile` does it). Called once per device, block, layout and
/// cluster, on the first launch.
pub type LowerGemm = fn(HopperTile, BLayout, u32) -> Result<Lowered, CudaError>;

/// What the first call on a device did to get the kernel (for a verbose report).
#[derive(Debug, Clone)]
pub struct KernelLoad {
    pub kernel: String,
    pub device: String,
    /// Seconds to lower, compile (or read from the cache) and load the kernel.
    pub seconds: f64,
    pub compile: CudaCompileReport,
}

/// A loaded kernel; the driver handles are plain pointers valid in any thread once the context is current.
pub(crate) struct Loaded {
    function: cu::CUfunction,
    pub(crate) lowered: Lowered,
    /// Blocks of a persistent grid: the SMs, or as many as whole clusters fit at once.
    pub(crate) resident: u32,
    pub(crate) load: KernelLoad,
}

// SAFETY: CUfunction/CUcontext handles are process-wide driver objects, usable from any thread with the
// context current (every use below pushes it first); `Loaded` is never mutated after creation.
unsafe impl Send for Loaded {}
unsafe impl Sync for Loaded {}

/// One device's retained primary context and the kernels loaded there, by configuration key.
struct DeviceState {
    ordinal: i32,
    ctx: usize,
    kernels: Vec<(String, Arc<Loaded>)>,
}

static DEVICES: Mutex<Vec<DeviceState>> = Mutex::new(Vec::new());

/// `libcuda.so.1` must be loadable before `cudarc` is asked for a symbol (it would panic otherwise).
fn driver_present() -> Result<(), CudaError> {
    // SAFETY: opening the driver runs its initialisers only.
    match unsafe { libloading::Library::new("libcuda.so.1") } {
        Ok(lib) => {
            std::mem::forget(lib); // cudarc opens it again by name; keep it loaded
            Ok(())
        }
        Err(e) => Err(CudaError::NoDriver(format!(
            "libcuda.so.1 could not be loaded: {e}"
        ))),
    }
}

/// The primary context of device `ordinal`, retained on first use.
fn primary_context(ordinal: i32) -> Result<cu::CUcontext, CudaError> {
    let mut devices = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devices.iter().find(|d| d.ordinal == ordinal) {
        return Ok(d.ctx as cu::CUcontext);
    }
    driver_present()?;
    // SAFETY: plain driver calls with out-parameters.
    let ctx = unsafe {
        let r = cu::cuInit(0);
        if r != cu::CUresult::CUDA_SUCCESS {
            return Err(CudaError::NoDevice(format!("cuInit: {r:?}")));
        }
        let mut dev = 0;
        check(cu::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")
            .map_err(|e| CudaError::NoDevice(format!("device {ordinal}: {e}")))?;
        let mut ctx = std::ptr::null_mut();
        check(
            cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            "cuDevicePrimaryCtxRetain",
        )?;
        ctx
    };
    devices.push(DeviceState {
        ordinal,
        ctx: ctx as usize,
        kernels: Vec::new(),
    });
    Ok(ctx)
}

/// Runs `f` with device `ordinal`'s primary context current, restoring the caller's afterwards.
pub(crate) fn in_context<T>(
    ordinal: i32,
    f: impl FnOnce() -> Result<T, CudaError>,
) -> Result<T, CudaError> {
    let ctx = primary_context(ordinal)?;
    let mut current = std::ptr::null_mut();
    // SAFETY: out-parameter.
    check(
        unsafe { cu::cuCtxGetCurrent(&mut current) },
        "cuCtxGetCurrent",
    )?;
    if current == ctx {
        // The framework (PyTorch) already has this device's primary context current on the thread:
        // nothing to push or pop.
        return f();
    }
    // SAFETY: a retained context; popped below on every path.
    check(unsafe { cu::cuCtxPushCurrent_v2(ctx) }, "cuCtxPushCurrent")?;
    let r = f();
    let mut popped = std::ptr::null_mut();
    // SAFETY: pops the context pushed above.
    let p = check(
        unsafe { cu::cuCtxPopCurrent_v2(&mut popped) },
        "cuCtxPopCurrent",
    );
    r.and_then(|v| p.map(|_| v))
}

fn attribute(dev: cu::CUdevice, a: cu::CUdevice_attribute) -> Result<i32, CudaError> {
    let mut v = 0;
    // SAFETY: out-parameter.
    check(
        unsafe { cu::cuDeviceGetAttribute(&mut v, a, dev) },
        "cuDeviceGetAttribute",
    )?;
    Ok(v)
}

/// Compiles (or reads from the cache) and loads the kernel `lower` gives on `ordinal`; the context is
/// current.
fn load(ordinal: i32, lower: &dyn Fn() -> Result<Lowered, CudaError>) -> Result<Loaded, CudaError> {
    let t = Instant::now();
    use cu::CUdevice_attribute as A;
    let mut dev = 0;
    // SAFETY: out-parameters.
    let name = unsafe {
        check(cu::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
        let mut name = [0 as std::ffi::c_char; 256];
        check(
            cu::cuDeviceGetName(name.as_mut_ptr(), 256, dev),
            "cuDeviceGetName",
        )?;
        std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned()
    };
    let cc = (
        attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    // sm_90a code runs on compute capability 9.0 only (PTX ISA §"Architecture-specific features").
    if cc != (9, 0) {
        return Err(invalid(format!(
            "{name} (compute capability {}.{}) cannot run kittens' CUDA kernels, which are compiled \
             for sm_90a (Hopper, compute capability 9.0)",
            cc.0, cc.1
        )));
    }
    let multiprocessors = attribute(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    let l = lower()?;
    let shared = l.dynamic_shared_bytes();
    let image = compile(&l.source, &l.entry, "sm_90a", shared)?;
    let mut module = std::ptr::null_mut();
    let mut function = std::ptr::null_mut();
    let fname = std::ffi::CString::new(l.entry.as_str())
        .map_err(|_| invalid(format!("kernel name {:?}", l.entry)))?;
    // SAFETY: a complete cubin that outlives the call; out-parameters. The module is never unloaded (it
    // lives as long as the process, like the retained context).
    unsafe {
        check(
            cu::cuModuleLoadData(&mut module, image.cubin.as_ptr().cast()),
            "cuModuleLoadData",
        )?;
        check(
            cu::cuModuleGetFunction(&mut function, module, fname.as_ptr()),
            "cuModuleGetFunction",
        )?;
        check(
            cu::cuFuncSetAttribute(
                function,
                cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                i32::try_from(shared).map_err(|_| invalid(format!("{shared} B shared")))?,
            ),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )?;
    }
    let resident =
        super::driver::resident_blocks(function, shared, l.threads, l.cluster, multiprocessors)?;
    Ok(Loaded {
        function,
        resident,
        load: KernelLoad {
            kernel: l.entry.clone(),
            device: name,
            seconds: t.elapsed().as_secs_f64(),
            compile: image.report,
        },
        lowered: l,
    })
}

/// The device's kernel of configuration `key`, loaded by `lower` on first use; `true` when this call
/// loaded it. The device's primary context must be current (see [`in_context`]).
pub(crate) fn kernel_on(
    ordinal: i32,
    key: &str,
    lower: &dyn Fn() -> Result<Lowered, CudaError>,
) -> Result<(Arc<Loaded>, bool), CudaError> {
    let cached = |devices: &[DeviceState]| {
        devices
            .iter()
            .find(|d| d.ordinal == ordinal)
            .and_then(|d| d.kernels.iter().find(|(k, _)| k == key))
            .map(|(_, g)| g.clone())
    };
    if let Some(g) = cached(&DEVICES.lock().unwrap_or_else(|p| p.into_inner())) {
        return Ok((g, false));
    }
    // Loaded outside the lock: compiling takes seconds, and other devices and kernels need not wait.
    let loaded = Arc::new(load(ordinal, lower)?);
    let mut devices = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    // Two threads may both have loaded it; keep the first.
    if let Some(g) = cached(&devices) {
        return Ok((g, false));
    }
    let d = devices
        .iter_mut()
        .find(|d| d.ordinal == ordinal)
        .ok_or_else(|| invalid("device state vanished"))?;
    d.kernels.push((key.to_owned(), loaded.clone()));
    Ok((loaded, true))
}

/// Enqueues `k` with `grid` blocks and the argument pointers `params` on `stream`.
///
/// # Safety
/// `params` must hold one live pointer per kernel argument in the lowering's order and types, and the
/// memory the arguments address must stay allocated until the launch has run; the kernel's context is
/// current and `stream` is a live stream of it (or 0).
pub(crate) unsafe fn enqueue(
    k: &Loaded,
    grid: u32,
    params: &mut [*mut c_void],
    stream: u64,
) -> Result<(), CudaError> {
    // SAFETY: forwarded.
    unsafe { enqueue_as(k, grid, params, stream, false) }
}

/// [`enqueue`], `programmatic`: with programmatic stream serialization (the GEMM after its operand
/// copies: its launch and setup overlap the copy's end, `driver::launch_raw`).
///
/// # Safety
/// As [`enqueue`]; a `programmatic` kernel waits (`griddepcontrol.wait`) before touching what the
/// kernel before it writes.
unsafe fn enqueue_as(
    k: &Loaded,
    grid: u32,
    params: &mut [*mut c_void],
    stream: u64,
    programmatic: bool,
) -> Result<(), CudaError> {
    let l = &k.lowered;
    // SAFETY: forwarded from the caller.
    unsafe {
        super::driver::launch_raw(
            k.function,
            (grid, 1, 1),
            (l.threads, 1, 1),
            (l.dynamic_shared_bytes(), l.cluster),
            stream as cu::CUstream,
            params,
            programmatic,
        )
    }
}

/// Checks that `[ptr, ptr + bytes)` lies inside one allocation on device `ordinal`: one
/// `cuPointerGetAttributes` call for the device, the allocation's start and its size (CUDA driver API
/// §"Unified Addressing": an address that is no CUDA allocation gets no range, not an error).
pub(crate) fn check_pointer(
    what: &str,
    ptr: u64,
    bytes: u64,
    ordinal: i32,
) -> Result<(), CudaError> {
    let mut dev: i32 = -1;
    let (mut start, mut size): (u64, usize) = (0, 0);
    use cu::CUpointer_attribute as P;
    let mut attrs = [
        P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        P::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let mut data: [*mut c_void; 3] = [
        (&mut dev as *mut i32).cast(),
        (&mut start as *mut u64).cast(),
        (&mut size as *mut usize).cast(),
    ];
    // SAFETY: three attributes, each with an out-parameter of the size it documents (int,
    // CUdeviceptr, size_t), alive for the call.
    let r = unsafe {
        check(
            cu::cuPointerGetAttributes(3, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr),
            "cuPointerGetAttributes",
        )
    };
    r.map_err(|e| invalid(format!("{what} at {ptr:#x}: {e}")))?;
    if size == 0 {
        return Err(invalid(format!(
            "{what} at {ptr:#x} is not CUDA device memory"
        )));
    }
    if dev != ordinal {
        return Err(invalid(format!(
            "{what} lives on device {dev}, the launch is on device {ordinal}"
        )));
    }
    let end = ptr.checked_add(bytes);
    if end.is_none_or(|e| e > start.saturating_add(size as u64)) {
        return Err(invalid(format!(
            "{what}: {bytes} bytes at {ptr:#x} run past its allocation ({size} bytes at {start:#x})"
        )));
    }
    Ok(())
}

/// Dense bf16 GEMM operands at raw device addresses: `C = A·Bᵀ` with A `m × k`, B `n × k` and C `m × n`,
/// all row-major with no padding; or `C = A·B` with B `k × n` row-major (`b_layout`).
#[derive(Debug, Clone, Copy)]
pub struct GemmPointers {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub b_layout: BLayout,
}

/// Enqueues `C = A·Bᵀ` (or `C = A·B`, by `p.b_layout`) on `stream` (a `CUstream` handle; 0 is the legacy default stream) of device
/// `ordinal`, in its primary context, with the block the shape-aware configuration chooses
/// (`gemm_bf16::shapes::choose`) for the device's SM count. Any M, N, K ≥ 1: an operand TMA cannot
/// address in place (a row pitch that is no multiple of 16 bytes, a base that is not 16-byte aligned)
/// is copied into stream-ordered scratch (`cuMemAllocAsync`, freed with `cuMemFreeAsync` after the
/// launch) and C copied back out (`super::gemm_pad`); nothing synchronises. Returns the kernel load when
/// this call loaded it (the first call of a block on the device), else `None`. Errors name the problem:
/// no driver, not a Hopper GPU, pointers that are not device memory of that device or too small.
///
/// # Safety
/// The three ranges must stay allocated until the launch has run on `stream`, C must not overlap A or B,
/// and `stream` must be a live stream of that context (or 0).
pub unsafe fn gemm_bf16_abt(
    ordinal: i32,
    stream: u64,
    p: &GemmPointers,
    lower: LowerGemm,
) -> Result<Option<KernelLoad>, CudaError> {
    let (m, n, k) = (p.m, p.n, p.k);
    let fits = |x: usize| x > 0 && i32::try_from(x).is_ok();
    if !(fits(m) && fits(n) && fits(k)) {
        return Err(invalid(format!(
            "{m}x{n}x{k}: every dimension must be in 1..=2^31-1"
        )));
    }
    let bytes = |r: usize, c: usize| (r as u64) * (c as u64) * 2;
    in_context(ordinal, || {
        check_pointer("A", p.a, bytes(m, k), ordinal)?;
        check_pointer("B", p.b, bytes(n, k), ordinal)?;
        check_pointer("C", p.c, bytes(m, n), ordinal)?;
        let sms = multiprocessors(ordinal)?;
        let gpu = kittens_hw::Target::Sm90a
            .gpu()
            .ok_or_else(|| invalid("no sm_90a GPU in the catalog"))?;
        let tile = shapes::choose(gpu, sms, m as u64, n as u64, k as u64);
        let b = match p.b_layout {
            BLayout::Nk => Mat::dense(p.b, n, k),
            BLayout::Kn => Mat::dense(p.b, k, n),
        };
        let (a, c) = (Mat::dense(p.a, m, k), Mat::dense(p.c, m, n));
        // The bench's plan: what TMA cannot address copied, B off 128-byte lines read in place by
        // clusters of two where its copy would pay.
        let (plan, cluster) = PadPlan::auto(&a, &b, &c, (m, n), tile.rows);
        let key = format!("gemm_bf16 {tile} {:?} c{cluster}", p.b_layout);
        let (g, fresh) = kernel_on(ordinal, &key, &|| lower(tile, p.b_layout, cluster))?;
        let l = &g.lowered;
        let globals: Vec<&str> = l.ir.globals.iter().map(|g| g.name.as_str()).collect();
        if globals != ["a", "b", "c"] {
            return Err(invalid(format!(
                "the lowered GEMM takes globals {globals:?}; this launcher knows a, b, c"
            )));
        }
        let [ma, mb, mc] = gemm_maps(l)?;
        let raw = stream as cu::CUstream;
        // Scratch for the padded copies, in stream order: allocated, filled, read, freed.
        let mut scratch = Vec::new();
        let mut put = |need: bool, src: Mat, copy_in: bool| -> Result<Mat, CudaError> {
            if !need {
                return Ok(src);
            }
            let mut ptr = 0;
            // SAFETY: out-parameter; a stream of the current context.
            check(
                unsafe { cu::cuMemAllocAsync(&mut ptr, src.padded_bytes()?, raw) },
                "cuMemAllocAsync",
            )?;
            scratch.push(ptr);
            let dst = src.padded_at(ptr);
            if copy_in {
                // SAFETY: the caller's operand (checked above) and fresh scratch of its padded size.
                unsafe { copy(ordinal, stream, &dst, &src)? };
            }
            Ok(dst)
        };
        let run = (|| {
            let (pa, pb, pc) = (
                put(plan.a, a, true)?,
                put(plan.b, b, true)?,
                put(plan.c, c, false)?,
            );
            let maps = [mat_map(&pa, &ma)?, mat_map(&pb, &mb)?, mat_map(&pc, &mc)?];
            let mut args = GemmArgs::new(l, maps, [pa.ptr, pb.ptr, pc.ptr], [m, n, k])?;
            let mut params = args.pointers();
            let grid = l
                .blocks(
                    &[("m", m as i64), ("n", n as i64), ("k", k as i64)],
                    g.resident,
                )
                .ok_or_else(|| invalid("grid extents of the lowered GEMM"))?;
            // SAFETY: one pointer per argument of the lowering's list (`GemmArgs`), alive until the
            // call returns; the caller keeps the buffers and the stream alive, the scratch lives until
            // its stream-ordered free below. After copies of A or B the launch is programmatic: the
            // lowered GEMM waits for the copies (`griddepcontrol.wait`) after its barrier setup.
            unsafe { enqueue_as(&g, grid, &mut params, stream, plan.a || plan.b)? };
            if plan.c {
                // SAFETY: scratch C and the caller's C, both live in stream order.
                unsafe { copy(ordinal, stream, &c, &pc)? };
            }
            Ok::<(), CudaError>(())
        })();
        for ptr in scratch {
            // SAFETY: freed after everything enqueued on the stream before it.
            check(unsafe { cu::cuMemFreeAsync(ptr, raw) }, "cuMemFreeAsync")?;
        }
        run?;
        Ok(fresh.then(|| g.load.clone()))
    })
}

/// Enqueues the copy of `src`'s rows into `dst` (same extents, other pitch) on `stream`: with the copy
/// kernel (`gemm_bf16::align`, loaded once per device) where both bases are 16-byte aligned, else
/// the driver's pitched copy, which moved 3000³'s operands at about 1.4 TB/s on the H100 where the
/// kernel streams at the DRAM's rate (docs/performance.md).
///
/// # Safety
/// Both matrices inside live device allocations of the current context until the copy has run on
/// `stream`, not overlapping.
unsafe fn copy(ordinal: i32, stream: u64, dst: &Mat, src: &Mat) -> Result<(), CudaError> {
    if !(src.ptr.is_multiple_of(16) && dst.ptr.is_multiple_of(16)) {
        // SAFETY: forwarded.
        return unsafe { gemm_pad::copy(dst, src, stream as cu::CUstream) };
    }
    let int = |x: usize| i64::try_from(x).map_err(|_| invalid(format!("copy extent {x}")));
    let span = |m: &Mat| (m.rows.saturating_sub(1) * m.pitch + m.cols) as u64 * 2;
    let call = super::caller_mem::StripCall {
        key: "gemm_operand_copy".into(),
        tensors: &[("src", src.ptr, span(src)), ("dst", dst.ptr, span(dst))],
        params: &[
            ("rows", int(src.rows)?),
            ("cols", int(src.cols)?),
            ("src_pitch", int(src.pitch)?),
            ("dst_pitch", int(dst.pitch)?),
        ],
    };
    let lower = || {
        kittens_codegen::lower(&gemm_pad::copy_program()?, kittens_hw::Target::Sm90a)
            .map_err(|e| invalid(format!("lowering the operand copy: {e}")))
    };
    // SAFETY: forwarded; the tensors' ranges are the matrices' (checked by the caller).
    unsafe { super::caller_mem::enqueue_strip(ordinal, stream, &call, &lower) }.map(|_| ())
}

/// SMs of device `ordinal` (the shape-aware choice quantises work over them), asked of the driver
/// once per device.
pub(crate) fn multiprocessors(ordinal: i32) -> Result<u32, CudaError> {
    static SMS: Mutex<Vec<(i32, u32)>> = Mutex::new(Vec::new());
    if let Some(&(_, n)) = SMS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(o, _)| *o == ordinal)
    {
        return Ok(n);
    }
    let mut dev = 0;
    // SAFETY: out-parameter.
    check(unsafe { cu::cuDeviceGet(&mut dev, ordinal) }, "cuDeviceGet")?;
    let n = attribute(
        dev,
        cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    )?;
    let n = u32::try_from(n).map_err(|_| invalid(format!("{n} multiprocessors")))?;
    SMS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((ordinal, n));
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(m: usize, n: usize, k: usize) -> Result<Option<KernelLoad>, CudaError> {
        let p = GemmPointers {
            a: 0x1000,
            b: 0x2000,
            c: 0x3000,
            m,
            n,
            k,
            b_layout: BLayout::Nk,
        };
        // SAFETY: the addresses are never dereferenced on the host; the driver checks refuse them.
        let lower: LowerGemm = |_, _, _| Err(invalid("not lowered in this test"));
        unsafe { gemm_bf16_abt(0, 0, &p, lower) }
    }

    /// Sizes past 32 bits or empty are refused before any driver call; N or K no multiple of 8 is not
    /// (it takes the padded path), so on any machine it gets as far as the pointer checks.
    #[test]
    fn refuses_sizes_the_launcher_cannot_take() {
        let e = launch(16, 12, 63).unwrap_err().to_string();
        assert!(!e.contains("multiple"), "{e}");
        let e = launch(0, 8, 8).unwrap_err().to_string();
        assert!(e.contains("1..=2^31-1"), "{e}");
        let e = launch(1 << 31, 8, 8).unwrap_err().to_string();
        assert!(e.contains("1..=2^31-1"), "{e}");
    }

    /// Host addresses are refused on any machine: no driver, no device, or "not CUDA device memory".
    #[test]
    fn host_pointers_are_an_error_not_a_crash() {
        let e = launch(64, 64, 64).unwrap_err();
        assert!(
            matches!(
                e,
                CudaError::NoDriver(_) | CudaError::NoDevice(_) | CudaError::Invalid(_)
            ),
            "{e}"
        );
    }
}
