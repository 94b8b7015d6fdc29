//! The HIP runtime, loaded at run time (as the CUDA driver is; docs/architecture.md principle 5): a
//! code object loaded with `hipModuleLoadData` and launched with `hipModuleLaunchKernel`, its
//! arguments passed as one kernarg buffer (`HIP_LAUNCH_PARAM_BUFFER_POINTER`) packed from the code
//! object's own metadata by [`kittens_amdsim::kernarg::pack`], the function the ISA emulator's
//! launches use too. Building needs no ROCm; on a machine without it, [`HipRuntime::load`] says so.
//!
//! Function signatures are those of ROCm's `hip_runtime_api.h` (HIP runtime API reference).

use libloading::{Library, Symbol};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// What can go wrong with the HIP runtime.
#[derive(Debug, thiserror::Error)]
pub enum HipError {
    #[error(
        "no ROCm runtime found (libamdhip64.so): looked at {looked}; install ROCm or set \
         KITTENS_HIP_LIB to the library's path"
    )]
    NoRocm { looked: String },
    /// `KITTENS_HIP_LIB` names a library that cannot be trusted (relative, or others may write it).
    #[error("libamdhip64 not loaded: {0}")]
    Untrusted(#[from] crate::trust::TrustError),
    #[error("{lib} lacks the HIP function `{name}`")]
    Symbol { lib: String, name: &'static str },
    #[error("{call} failed: HIP error {code} ({text})")]
    Call {
        call: &'static str,
        code: c_int,
        text: String,
    },
    #[error("no AMD GPU visible to HIP (hipGetDeviceCount = 0)")]
    NoDevice,
    #[error("{0}")]
    Bad(String),
}

type Status = c_int;
type Ptr = *mut c_void;

/// The HIP functions a launch needs.
struct Api {
    init: unsafe extern "C" fn(c_uint) -> Status,
    device_count: unsafe extern "C" fn(*mut c_int) -> Status,
    module_load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> Status,
    module_unload: unsafe extern "C" fn(Ptr) -> Status,
    module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Status,
    malloc: unsafe extern "C" fn(*mut Ptr, usize) -> Status,
    free: unsafe extern "C" fn(Ptr) -> Status,
    memcpy_htod: unsafe extern "C" fn(Ptr, *const c_void, usize) -> Status,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, Ptr, usize) -> Status,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        Ptr,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Ptr,
        *mut Ptr,
        *mut Ptr,
    ) -> Status,
    synchronize: unsafe extern "C" fn() -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    memset: unsafe extern "C" fn(Ptr, c_int, usize) -> Status,
    event_create: unsafe extern "C" fn(*mut Ptr) -> Status,
    event_destroy: unsafe extern "C" fn(Ptr) -> Status,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> Status,
    event_synchronize: unsafe extern "C" fn(Ptr) -> Status,
    event_elapsed: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> Status,
}

/// A loaded HIP runtime with one visible device (device 0).
pub struct HipRuntime {
    api: Api,
    _lib: Library,
    pub path: String,
}

/// `HIP_LAUNCH_PARAM_*` markers of `hipModuleLaunchKernel`'s `extra` array (hip_runtime_api.h).
const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;
const END: usize = 3;

/// Where libamdhip64 is looked for, in order: `KITTENS_HIP_LIB` (an absolute path that passes
/// [`crate::trust::explicit_file`]; otherwise an error, never a library from the current folder), the
/// loader's search path by name, then ROCm's folder.
pub fn candidates() -> Result<Vec<String>, HipError> {
    candidates_in(|v| std::env::var_os(v))
}

/// [`candidates`] with the environment as `var` reports it.
pub fn candidates_in(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Vec<String>, HipError> {
    use crate::trust::{explicit, Role};
    let mut v = Vec::new();
    if let Some(p) = explicit("KITTENS_HIP_LIB", var("KITTENS_HIP_LIB"), Role::File)? {
        v.push(p.to_string_lossy().into_owned());
    }
    v.extend(
        [
            "libamdhip64.so",
            "libamdhip64.so.6",
            "/opt/rocm/lib/libamdhip64.so",
        ]
        .map(String::from),
    );
    Ok(v)
}

impl HipRuntime {
    /// Open libamdhip64 and initialise HIP; [`HipError::NoRocm`] when no library is found.
    pub fn load() -> Result<HipRuntime, HipError> {
        let looked = candidates()?;
        let (lib, path) = looked
            .iter()
            .find_map(|p| unsafe { Library::new(p) }.ok().map(|l| (l, p.clone())))
            .ok_or_else(|| HipError::NoRocm {
                looked: looked.join(", "),
            })?;
        macro_rules! sym {
            ($name:literal) => {{
                let s: Symbol<_> =
                    unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|_| {
                        HipError::Symbol {
                            lib: path.clone(),
                            name: $name,
                        }
                    })?;
                *s
            }};
        }
        let api = Api {
            init: sym!("hipInit"),
            device_count: sym!("hipGetDeviceCount"),
            module_load_data: sym!("hipModuleLoadData"),
            module_unload: sym!("hipModuleUnload"),
            module_get_function: sym!("hipModuleGetFunction"),
            malloc: sym!("hipMalloc"),
            free: sym!("hipFree"),
            memcpy_htod: sym!("hipMemcpyHtoD"),
            memcpy_dtoh: sym!("hipMemcpyDtoH"),
            launch: sym!("hipModuleLaunchKernel"),
            synchronize: sym!("hipDeviceSynchronize"),
            error_string: sym!("hipGetErrorString"),
            memset: sym!("hipMemset"),
            event_create: sym!("hipEventCreate"),
            event_destroy: sym!("hipEventDestroy"),
            event_record: sym!("hipEventRecord"),
            event_synchronize: sym!("hipEventSynchronize"),
            event_elapsed: sym!("hipEventElapsedTime"),
        };
        let rt = HipRuntime {
            api,
            _lib: lib,
            path,
        };
        rt.check("hipInit", unsafe { (rt.api.init)(0) })?;
        let mut n = 0;
        rt.check("hipGetDeviceCount", unsafe {
            (rt.api.device_count)(&mut n)
        })?;
        if n < 1 {
            return Err(HipError::NoDevice);
        }
        Ok(rt)
    }

    fn check(&self, call: &'static str, code: Status) -> Result<(), HipError> {
        if code == 0 {
            return Ok(());
        }
        let p = unsafe { (self.api.error_string)(code) };
        let text = if p.is_null() {
            "no description".into()
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(HipError::Call { call, code, text })
    }

    /// Copy `data` to a new device allocation.
    pub fn upload(&self, data: &[u8]) -> Result<DeviceBuffer<'_>, HipError> {
        let mut p: Ptr = std::ptr::null_mut();
        self.check("hipMalloc", unsafe {
            (self.api.malloc)(&mut p, data.len().max(1))
        })?;
        let b = DeviceBuffer {
            rt: self,
            ptr: p,
            len: data.len(),
        };
        self.check("hipMemcpyHtoD", unsafe {
            (self.api.memcpy_htod)(p, data.as_ptr().cast(), data.len())
        })?;
        Ok(b)
    }

    /// Load a code object, launch its kernel `name` once on `grid` workgroups of `block` work-items
    /// with the packed kernarg bytes, and wait for it.
    pub fn launch(
        &self,
        code_object: &[u8],
        name: &str,
        kernarg: &[u8],
        kernarg_size: usize,
        grid: u32,
        block: u32,
    ) -> Result<(), HipError> {
        let module = self.load_module(code_object, name)?;
        module.launch(kernarg, kernarg_size, grid, block)?;
        self.synchronize()
    }

    /// Load a code object and find its kernel `name`; unloaded on drop.
    pub fn load_module(&self, code_object: &[u8], name: &str) -> Result<Module<'_>, HipError> {
        let mut module: Ptr = std::ptr::null_mut();
        self.check("hipModuleLoadData", unsafe {
            (self.api.module_load_data)(&mut module, code_object.as_ptr().cast())
        })?;
        // From here on the module unloads on drop, also when the kernel is not found.
        let mut m = Module {
            rt: self,
            module,
            function: std::ptr::null_mut(),
        };
        let cname =
            CString::new(name).map_err(|_| HipError::Bad(format!("kernel name {name:?}")))?;
        self.check("hipModuleGetFunction", unsafe {
            (self.api.module_get_function)(&mut m.function, module, cname.as_ptr())
        })?;
        Ok(m)
    }

    /// Wait for everything queued on the device.
    pub fn synchronize(&self) -> Result<(), HipError> {
        self.check("hipDeviceSynchronize", unsafe { (self.api.synchronize)() })
    }

    /// A new device allocation of `len` bytes, zeroed.
    pub fn zeroed(&self, len: usize) -> Result<DeviceBuffer<'_>, HipError> {
        let mut p: Ptr = std::ptr::null_mut();
        self.check("hipMalloc", unsafe {
            (self.api.malloc)(&mut p, len.max(1))
        })?;
        let b = DeviceBuffer {
            rt: self,
            ptr: p,
            len,
        };
        self.check("hipMemset", unsafe { (self.api.memset)(p, 0, len.max(1)) })?;
        Ok(b)
    }

    /// Milliseconds between two points of the default stream around `work` (hipEventRecord before
    /// and after it, hipEventElapsedTime between them once the second has completed).
    pub fn time_ms<E: From<HipError>>(
        &self,
        work: impl FnOnce() -> Result<(), E>,
    ) -> Result<f32, E> {
        let (start, stop) = (self.event()?, self.event()?);
        self.check("hipEventRecord", unsafe {
            (self.api.event_record)(start.0, std::ptr::null_mut())
        })?;
        work()?;
        self.check("hipEventRecord", unsafe {
            (self.api.event_record)(stop.0, std::ptr::null_mut())
        })?;
        self.check("hipEventSynchronize", unsafe {
            (self.api.event_synchronize)(stop.0)
        })?;
        let mut ms = 0f32;
        self.check("hipEventElapsedTime", unsafe {
            (self.api.event_elapsed)(&mut ms, start.0, stop.0)
        })?;
        Ok(ms)
    }

    fn event(&self) -> Result<Event<'_>, HipError> {
        let mut e: Ptr = std::ptr::null_mut();
        self.check("hipEventCreate", unsafe { (self.api.event_create)(&mut e) })?;
        Ok(Event(e, self))
    }
}

struct Event<'r>(Ptr, &'r HipRuntime);

impl Drop for Event<'_> {
    fn drop(&mut self) {
        unsafe { (self.1.api.event_destroy)(self.0) };
    }
}

/// A loaded code object and its kernel.
pub struct Module<'r> {
    rt: &'r HipRuntime,
    module: Ptr,
    function: Ptr,
}

impl Module<'_> {
    /// Queue one launch on the default stream (no wait): `grid` workgroups of `block` work-items,
    /// the kernel arguments as one buffer (`HIP_LAUNCH_PARAM_BUFFER_POINTER`).
    pub fn launch(
        &self,
        kernarg: &[u8],
        kernarg_size: usize,
        grid: u32,
        block: u32,
    ) -> Result<(), HipError> {
        if kernarg.len() < kernarg_size {
            return Err(HipError::Bad(format!(
                "kernarg buffer of {} bytes for a {kernarg_size}-byte segment",
                kernarg.len()
            )));
        }
        let mut size = kernarg_size;
        let mut extra: [Ptr; 5] = [
            BUFFER_POINTER as Ptr,
            kernarg.as_ptr() as Ptr,
            BUFFER_SIZE as Ptr,
            (&mut size as *mut usize).cast(),
            END as Ptr,
        ];
        self.rt.check("hipModuleLaunchKernel", unsafe {
            (self.rt.api.launch)(
                self.function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                extra.as_mut_ptr(),
            )
        })
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        unsafe { (self.rt.api.module_unload)(self.module) };
    }
}

/// A device allocation, freed on drop.
pub struct DeviceBuffer<'r> {
    rt: &'r HipRuntime,
    ptr: Ptr,
    len: usize,
}

impl DeviceBuffer<'_> {
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn download(&self) -> Result<Vec<u8>, HipError> {
        let mut out = vec![0u8; self.len];
        self.rt.check("hipMemcpyDtoH", unsafe {
            (self.rt.api.memcpy_dtoh)(out.as_mut_ptr().cast(), self.ptr, self.len)
        })?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        unsafe { (self.rt.api.free)(self.ptr) };
    }
}
