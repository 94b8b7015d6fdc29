//! The CUDA driver API through `cudarc`'s dynamically loaded bindings: a device with its primary
//! context, device buffers, streams, events, modules loaded from cubins, launches with dynamic shared
//! memory, and TMA tensor maps (`cuTensorMapEncodeTiled`, CUDA Driver API §6.29 "Tensor Map Object
//! Management"). Single-threaded by design: [`Device::open`] makes its context current on the calling
//! thread, and every other call is expected on that thread.

use std::ffi::{c_void, CStr, CString};
use std::rc::Rc;

use cudarc::driver::sys as cu;

use super::limits::{bytes_of, check_launch, to_i32};
use super::CudaError;

mod tensor_map;

pub(crate) use tensor_map::{encode_bf16, encode_tiled, MapType};
pub use tensor_map::{Swizzle, TensorMap};

/// Turns a driver status into a typed error naming the call.
pub(crate) fn check(r: cu::CUresult, call: &'static str) -> Result<(), CudaError> {
    if r == cu::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: out-parameter; the driver returns a static string or leaves it null.
    let msg = unsafe {
        if cu::cuGetErrorString(r, &mut p) == cu::CUresult::CUDA_SUCCESS && !p.is_null() {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        } else {
            format!("{r:?}")
        }
    };
    Err(CudaError::Driver { call, msg })
}

/// Checks that the NVIDIA driver library exists before `cudarc` is asked to load it (it would panic).
fn driver_present() -> Result<(), CudaError> {
    // SAFETY: opening the driver runs its initialisers only.
    match unsafe { libloading::Library::new("libcuda.so.1") } {
        Ok(lib) => {
            // Keep it loaded: cudarc opens the same library by name later.
            std::mem::forget(lib);
            Ok(())
        }
        Err(e) => Err(CudaError::NoDriver(format!(
            "libcuda.so.1 could not be loaded: {e}"
        ))),
    }
}

/// One GPU with its primary context, and the properties kernels and benchmarks need.
#[derive(Debug)]
pub struct Device {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    pub l2_bytes: u64,
    /// The most dynamic shared memory one block may opt into (227 KB on Hopper).
    pub max_shared_optin: u32,
    pub driver_version: i32,
    ctx: cu::CUcontext,
}

impl Device {
    /// Opens GPU `ordinal` and makes its primary context current on this thread.
    pub fn open(ordinal: usize) -> Result<Rc<Device>, CudaError> {
        driver_present()?;
        // SAFETY: plain driver calls with out-parameters.
        unsafe {
            let r = cu::cuInit(0);
            if r != cu::CUresult::CUDA_SUCCESS {
                return Err(CudaError::NoDevice(format!("cuInit: {r:?}")));
            }
            let mut dev = 0;
            let ordinal_i32 = to_i32("device ordinal", ordinal as u64, 0)?;
            check(cu::cuDeviceGet(&mut dev, ordinal_i32), "cuDeviceGet")
                .map_err(|e| CudaError::NoDevice(e.to_string()))?;
            let mut ctx = std::ptr::null_mut();
            check(
                cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
            check(cu::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
            let mut name = [0 as std::ffi::c_char; 256];
            check(
                cu::cuDeviceGetName(name.as_mut_ptr(), 256, dev),
                "cuDeviceGetName",
            )?;
            let attr = |a: cu::CUdevice_attribute| -> Result<i32, CudaError> {
                let mut v = 0;
                check(
                    cu::cuDeviceGetAttribute(&mut v, a, dev),
                    "cuDeviceGetAttribute",
                )
                .map(|_| v)
            };
            // Counts and sizes are never negative; a negative one is a driver fault, not a wrap.
            let count = |a: cu::CUdevice_attribute| -> Result<u32, CudaError> {
                let v = attr(a)?;
                u32::try_from(v).map_err(|_| {
                    CudaError::Invalid(format!("cuDeviceGetAttribute({a:?}) returned {v}"))
                })
            };
            use cu::CUdevice_attribute as A;
            let mut driver_version = 0;
            check(
                cu::cuDriverGetVersion(&mut driver_version),
                "cuDriverGetVersion",
            )?;
            Ok(Rc::new(Device {
                ordinal,
                name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                compute_capability: (
                    attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                    attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                ),
                multiprocessors: count(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
                l2_bytes: count(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.into(),
                max_shared_optin: count(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
                driver_version,
                ctx,
            }))
        }
    }

    /// Allocates `bytes` of device memory (plain `cuMemAlloc`, never managed memory).
    pub fn alloc(self: &Rc<Self>, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        let mut ptr = 0;
        // SAFETY: out-parameter; freed in Drop.
        check(
            unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes.max(1)) },
            "cuMemAlloc",
        )?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            _dev: self.clone(),
        })
    }

    /// Free and total device memory in bytes (`cuMemGetInfo`), for checking a size before allocating.
    pub fn mem_info(&self) -> Result<(u64, u64), CudaError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out-parameters; the context is current (made so in `open`).
        check(
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo",
        )?;
        Ok((free as u64, total as u64))
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: no arguments.
        check(unsafe { cu::cuCtxSynchronize() }, "cuCtxSynchronize")
    }

    /// Loads a cubin.
    pub fn load_module(self: &Rc<Self>, cubin: &[u8]) -> Result<Module, CudaError> {
        let mut m = std::ptr::null_mut();
        // SAFETY: the cubin bytes are a complete ELF image that outlives the call.
        check(
            unsafe { cu::cuModuleLoadData(&mut m, cubin.as_ptr().cast()) },
            "cuModuleLoadData",
        )?;
        Ok(Module {
            raw: Rc::new(RawModule(m)),
            _dev: self.clone(),
        })
    }

    /// The raw context, for libraries (cuBLAS) that need it current.
    pub fn make_current(&self) -> Result<(), CudaError> {
        // SAFETY: the context was retained in `open` and is never released.
        check(unsafe { cu::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent")
    }
}

/// Device memory, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: cu::CUdeviceptr,
    bytes: usize,
    _dev: Rc<Device>,
}

impl DeviceBuffer {
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Copies host data in; `data` must be exactly as large as the buffer.
    pub fn upload<T: Copy>(&mut self, data: &[T]) -> Result<(), CudaError> {
        self.same_size::<T>(data.len())?;
        // SAFETY: sizes match; the host slice is valid for reads.
        check(
            unsafe { cu::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), self.bytes) },
            "cuMemcpyHtoD",
        )
    }
    /// Copies the buffer out into `out`, which must be exactly as large.
    pub fn download<T: Copy>(&self, out: &mut [T]) -> Result<(), CudaError> {
        self.same_size::<T>(out.len())?;
        // SAFETY: sizes match; the host slice is valid for writes.
        check(
            unsafe { cu::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, self.bytes) },
            "cuMemcpyDtoH",
        )
    }
    /// Copies `data` into the buffer's first `data.len()` bytes (at most the buffer's size).
    pub fn upload_prefix(&mut self, data: &[u8]) -> Result<(), CudaError> {
        if data.len() > self.bytes {
            return Err(CudaError::Invalid(format!(
                "{} host bytes into a device buffer of {}",
                data.len(),
                self.bytes
            )));
        }
        // SAFETY: `data.len()` bytes fit the allocation; the host slice is valid for reads.
        check(
            unsafe { cu::cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), data.len()) },
            "cuMemcpyHtoD",
        )
    }
    /// The buffer's first `len` bytes (at most the buffer's size).
    pub fn download_prefix(&self, len: usize) -> Result<Vec<u8>, CudaError> {
        if len > self.bytes {
            return Err(CudaError::Invalid(format!(
                "{len} bytes read from a device buffer of {}",
                self.bytes
            )));
        }
        let mut out = vec![0u8; len];
        // SAFETY: `len` bytes lie inside the allocation; the host vector is valid for writes.
        check(
            unsafe { cu::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, len) },
            "cuMemcpyDtoH",
        )?;
        Ok(out)
    }
    /// Device-to-device copy of a whole buffer of the same size.
    pub fn copy_from(&mut self, src: &DeviceBuffer) -> Result<(), CudaError> {
        if src.bytes != self.bytes {
            return Err(CudaError::Invalid(format!(
                "copy of {} bytes into {}",
                src.bytes, self.bytes
            )));
        }
        // SAFETY: both allocations are live and of equal size.
        check(
            unsafe { cu::cuMemcpyDtoD_v2(self.ptr, src.ptr, self.bytes) },
            "cuMemcpyDtoD",
        )
    }
    /// Fills the buffer with one 16-bit pattern (used to poison outputs before a check).
    pub fn fill_u16(&mut self, value: u16) -> Result<(), CudaError> {
        // SAFETY: writes bytes/2 halves inside the allocation.
        check(
            unsafe { cu::cuMemsetD16_v2(self.ptr, value, self.bytes / 2) },
            "cuMemsetD16",
        )
    }
    fn same_size<T>(&self, len: usize) -> Result<(), CudaError> {
        let host = bytes_of("host slice", &[len as u64], std::mem::size_of::<T>() as u64)?;
        if host != self.bytes as u64 {
            return Err(CudaError::Invalid(format!(
                "host side has {host} bytes, device buffer {}",
                self.bytes
            )));
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc and freed once.
        unsafe {
            cu::cuMemFree_v2(self.ptr);
        }
    }
}

/// A CUDA stream.
pub struct Stream(cu::CUstream);

impl Stream {
    pub fn new() -> Result<Stream, CudaError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: out-parameter; destroyed in Drop.
        // Flags 0: a blocking stream, ordered after work on the legacy default stream (memsets and copies
        // from `DeviceBuffer`). A non-blocking stream let a NaN-poisoning memset run concurrently with
        // the kernel it was meant to precede (seen on the H100, 2026-11-22, at 16384³).
        check(unsafe { cu::cuStreamCreate(&mut s, 0) }, "cuStreamCreate")?;
        Ok(Stream(s))
    }
    pub fn raw(&self) -> cu::CUstream {
        self.0
    }
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: live stream.
        check(
            unsafe { cu::cuStreamSynchronize(self.0) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe {
            cu::cuStreamDestroy_v2(self.0);
        }
    }
}

/// A CUDA event, for timing on the device clock.
pub struct Event(cu::CUevent);

impl Event {
    pub fn new() -> Result<Event, CudaError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: out-parameter; flags 0 = timing enabled.
        check(unsafe { cu::cuEventCreate(&mut e, 0) }, "cuEventCreate")?;
        Ok(Event(e))
    }
    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        // SAFETY: live event and stream.
        check(
            unsafe { cu::cuEventRecord(self.0, stream.0) },
            "cuEventRecord",
        )
    }
    /// Milliseconds from `self` to `end`, waiting for `end` first.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32, CudaError> {
        let mut ms = 0f32;
        // SAFETY: live events; out-parameter.
        unsafe {
            check(cu::cuEventSynchronize(end.0), "cuEventSynchronize")?;
            check(
                cu::cuEventElapsedTime_v2(&mut ms, self.0, end.0),
                "cuEventElapsedTime",
            )?;
        }
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe {
            cu::cuEventDestroy_v2(self.0);
        }
    }
}

struct RawModule(cu::CUmodule);

impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: loaded once, unloaded once, after every Function holding it is gone.
        unsafe {
            cu::cuModuleUnload(self.0);
        }
    }
}

/// A loaded cubin.
pub struct Module {
    raw: Rc<RawModule>,
    _dev: Rc<Device>,
}

impl Module {
    /// Looks up an `extern "C"` kernel and allows it `dynamic_shared_bytes` of dynamic shared memory
    /// (anything over 48 KB needs the opt-in attribute, CUDA Programming Guide §"Shared Memory").
    pub fn function(&self, name: &str, dynamic_shared_bytes: u32) -> Result<Function, CudaError> {
        let c =
            CString::new(name).map_err(|_| CudaError::Invalid(format!("kernel name {name:?}")))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name, out-parameter.
        unsafe {
            check(
                cu::cuModuleGetFunction(&mut f, self.raw.0, c.as_ptr()),
                "cuModuleGetFunction",
            )?;
            check(
                cu::cuFuncSetAttribute(
                    f,
                    cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    to_i32("dynamic shared bytes", dynamic_shared_bytes.into(), 0)?,
                ),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
            )?;
        }
        Ok(Function {
            raw: f,
            shared: dynamic_shared_bytes,
            cluster: 1,
            _module: self.raw.clone(),
        })
    }
}

/// A kernel ready to launch.
pub struct Function {
    raw: cu::CUfunction,
    shared: u32,
    /// Blocks per thread-block cluster every launch asks for (1: none; `Lowered::cluster`).
    cluster: u32,
    _module: Rc<RawModule>,
}

impl Function {
    /// The same kernel launched in clusters of `n` blocks along x (`Lowered::cluster`).
    pub fn with_cluster(mut self, n: u32) -> Function {
        self.cluster = n.max(1);
        self
    }

    /// Blocks of a persistent grid of this kernel with `block` threads a block on a GPU of `sms`
    /// SMs ([`resident_blocks`]).
    pub fn resident_blocks(&self, sms: u32, block: u32) -> Result<u32, CudaError> {
        resident_blocks(self.raw, self.shared, block, self.cluster, sms)
    }

    /// Launches with the dynamic shared memory set in [`Module::function`], after checking the grid and
    /// block against the driver's limits ([`check_launch`]).
    ///
    /// # Safety
    /// `params` must point at values whose types and order match the kernel's parameters, and every
    /// buffer they name must hold what the kernel reads and writes at the launch's sizes.
    pub unsafe fn launch(
        &self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        stream: &Stream,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        // SAFETY: forwarded.
        unsafe { self.launch_as(grid, block, stream, params, false) }
    }

    /// [`Function::launch`], `programmatic`: with programmatic stream serialization
    /// (`cuLaunchKernelEx`): the grid may launch once every block of the previous kernel on `stream`
    /// has triggered or exited, before that kernel's memory is flushed; it waits for that with
    /// `griddepcontrol.wait` (the Hopper lowering after its barrier setup, strip kernels at entry).
    /// The kernels before it here never trigger early (the GEMM's operand copy did at entry once:
    /// the GEMM's blocks then held SMs the copy's last blocks needed, 0.73 against 0.83 of cuBLAS at
    /// 3000³); launched when they exit, the GEMM's launch and setup overlap the copy's end:
    /// 0.828-0.831 against 0.804-0.817 (H100, docs/performance.md).
    ///
    /// # Safety
    /// As [`Function::launch`]; a programmatic kernel must wait (`griddepcontrol.wait`) before
    /// touching memory the previous kernel writes.
    pub unsafe fn launch_as(
        &self,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        stream: &Stream,
        params: &mut [*mut c_void],
        programmatic: bool,
    ) -> Result<(), CudaError> {
        check_launch(grid, block)?;
        // SAFETY: forwarded.
        unsafe {
            launch_raw(
                self.raw,
                grid,
                block,
                (self.shared, self.cluster),
                stream.0,
                params,
                programmatic,
            )
        }
    }
}

/// Launches `function` with `shared` bytes of dynamic shared memory: `cuLaunchKernel`, or with
/// `programmatic` `cuLaunchKernelEx` with programmatic stream serialization
/// ([`Function::launch_as`]; the caller-memory launchers' raw handles use it too).
///
/// # Safety
/// As [`Function::launch_as`]; `function` a live kernel of the current context, `stream` a live
/// stream of it (or null), `shared` at most what the function allows.
pub(crate) unsafe fn launch_raw(
    function: cu::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    (shared, cluster): (u32, u32),
    stream: cu::CUstream,
    params: &mut [*mut c_void],
    programmatic: bool,
) -> Result<(), CudaError> {
    if !programmatic && cluster <= 1 {
        // SAFETY: forwarded from the caller.
        return check(
            unsafe {
                cu::cuLaunchKernel(
                    function,
                    grid.0,
                    grid.1,
                    grid.2,
                    block.0,
                    block.1,
                    block.2,
                    shared,
                    stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        );
    }
    if cluster > 1 && !grid.0.is_multiple_of(cluster) {
        return Err(CudaError::Invalid(format!(
            "a grid of {} blocks in clusters of {cluster}",
            grid.0
        )));
    }
    // (A cluster attribute of one block is left out: the launch stays an ordinary one.)
    let mut attrs = Vec::new();
    if cluster > 1 {
        attrs.push(cluster_attr(cluster));
    }
    if programmatic {
        // SAFETY: zeroed storage is a valid bit pattern for the attribute (a C union and an enum
        // whose zero is a listed value); both fields used are set below.
        let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        attrs.push(attr);
    }
    let config = cu::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: shared,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    };
    // SAFETY: a fully initialised config whose attributes outlive the call; the rest forwarded from
    // the caller.
    check(
        unsafe {
            cu::cuLaunchKernelEx(&config, function, params.as_mut_ptr(), std::ptr::null_mut())
        },
        "cuLaunchKernelEx",
    )
}

/// Blocks of a persistent grid of `function` (`block` threads, `shared` dynamic bytes) on a GPU of
/// `sms` SMs: one per SM, or in clusters of `cluster` as many as whole clusters fit at once
/// (`cuOccupancyMaxActiveClusters`: a GPC whose free SMs are odd leaves one out), at least one cluster.
pub(crate) fn resident_blocks(
    function: cu::CUfunction,
    shared: u32,
    block: u32,
    cluster: u32,
    sms: u32,
) -> Result<u32, CudaError> {
    if cluster <= 1 {
        return Ok(sms);
    }
    let mut attr = cluster_attr(cluster);
    let config = cu::CUlaunchConfig {
        gridDimX: sms / cluster * cluster,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared,
        hStream: std::ptr::null_mut(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut n = 0;
    // SAFETY: a fully initialised config with one attribute; a live function; out-parameter.
    check(
        unsafe { cu::cuOccupancyMaxActiveClusters(&mut n, function, &config) },
        "cuOccupancyMaxActiveClusters",
    )?;
    let fit = u32::try_from(n).unwrap_or(0);
    Ok((fit * cluster).clamp(cluster, sms.max(cluster)))
}

/// The launch attribute asking for clusters of `n` blocks along x (1: a cluster of one, as a launch
/// without the attribute).
fn cluster_attr(n: u32) -> cu::CUlaunchAttribute {
    // SAFETY: zeroed storage is a valid bit pattern for the attribute (a C union and an enum whose
    // zero is a listed value); the fields used are set below.
    let mut attr: cu::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = n.max(1);
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    attr
}
