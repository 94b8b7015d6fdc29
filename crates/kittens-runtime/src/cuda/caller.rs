//! Launching on memory, streams and contexts a framework owns (PyTorch's tensors and current stream):
//! lowered kernels on raw device pointers, enqueued on the caller's stream, in the device's primary
//! context — the context the CUDA runtime, and so PyTorch, uses (CUDA driver API §"Primary
//! Context Management"). Nothing here allocates, copies or synchronises, so a launch can be captured
//! into a CUDA graph once the kernel is loaded.
//!
//! This module holds what every such launch shares — the retained contexts, pointer checks, and the
//! per-device cache of loaded kernels keyed by kernel configuration; the launches themselves are
//! [`super::dispatch`]'s prepared calls. A kernel is compiled (NVRTC, on-disk cache: [`super::nvrtc`])
//! and loaded on first use per device and configuration, and kept for the life of the process; the
//! primary context is retained once and never released, so the loaded modules stay valid whatever the
//! framework does with its own reference.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::sys as cu;
use kittens_codegen::Lowered;

use super::driver::check;
use super::{compile, invalid, CudaCompileReport, CudaError};

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
    pub(crate) function: cu::CUfunction,
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
    // SAFETY: out-parameter.
    check(unsafe { cu::cuDeviceGet(&mut dev, ordinal) }, "cuDeviceGet")?;
    let name = device_name(dev)?;
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

/// The product name the driver gives device `dev` ("NVIDIA H200").
fn device_name(dev: cu::CUdevice) -> Result<String, CudaError> {
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer is 256 bytes, as passed; the driver writes a NUL-terminated name into it.
    unsafe {
        check(
            cu::cuDeviceGetName(name.as_mut_ptr(), 256, dev),
            "cuDeviceGetName",
        )?;
        Ok(std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned())
    }
}

/// The product name of device `ordinal` (the model a configuration is chosen for, by
/// `kittens_hw::gpu::for_device`).
pub(crate) fn product_name(ordinal: i32) -> Result<String, CudaError> {
    let mut dev = 0;
    // SAFETY: out-parameter.
    check(unsafe { cu::cuDeviceGet(&mut dev, ordinal) }, "cuDeviceGet")?;
    device_name(dev)
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
