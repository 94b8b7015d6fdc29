//! Prepared calls: the per-call path of every kernel on caller-owned memory (PyTorch's tensors, a Rust
//! caller's buffers), the same for every kernel and every tile program.
//!
//! A call is prepared once per configuration and layout ([`Prepared::new`]): its launches (one or more
//! tile programs with their parameters by name, [`StageSpec`]) are lowered for sm_90a, compiled
//! (NVRTC, checked disk cache) and loaded in the device's primary context — each distinct tile program
//! once per process and device, found by the hash of its serialised IR, so two shapes of one
//! configuration share the module — and the caller's tensors ([`TensorSpec`]: name, shape, strides,
//! dtype) are checked against every launch's declarations exactly as [`super::launch::check_args`]
//! checks a one-off launch. What the launches pass between them and the caller did not name (a key
//! split's partial results) becomes scratch the caller allocates ([`Prepared::scratch_bytes`]).
//! Everything a launch needs except the addresses is then fixed: argument order, parameter values,
//! grid, tensor-map geometry (`bind.rs`: a launch bound to the caller's layout).
//!
//! A launch of a prepared call ([`Prepared::launch`]) takes the addresses only: it checks their
//! alignment, finds each tensor map by address in a small per-map cache (encoded on a miss), fills the
//! argument array and enqueues. No allocation beyond that array, no synchronisation, no driver call but
//! the launch (and `cuTensorMapEncodeTiled`, a host-side encoding, on a cache miss) — so a call can be
//! captured in a CUDA graph once prepared (CUDA driver API §"Graph Management": stream capture records
//! the launch with its by-value arguments).
//!
//! Why prepare: the per-call host time of a framework op is what small and medium calls pay (the
//! one-path issue measured 2-4x PyTorch's); every check that depends on shapes alone is done once per
//! shape here, not once per call (Triton's launcher and CUDA graphs make the same split).

use std::collections::hash_map::DefaultHasher;
use std::ffi::c_void;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys as cu;
use kittens_hw::dtype::DType;
use kittens_hw::Target;
use kittens_ir::Kernel;

use super::args::MapGeometry;
use super::caller::{
    check_pointer, in_context, kernel_on, multiprocessors, product_name, KernelLoad, Loaded,
};
use super::driver::{encode_tiled, launch_raw, MapType};
use super::launch::{LaunchError, ALIGN};
use super::{invalid, CudaError};

mod bind;

use bind::{bind, check_free, declared, ordered_params};

/// One of the caller's tensors as a prepared call takes it: the layout is fixed, the address is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    /// In elements, as the tile program declares strides.
    pub strides: Vec<u64>,
    pub dtype: DType,
}

/// One launch of a call: a tile program and its integer parameters by name.
#[derive(Debug, Clone)]
pub struct StageSpec {
    pub kernel: Kernel,
    pub params: Vec<(String, i64)>,
}

/// Tensor maps kept per map slot: a loop over the same tensors (the usual case; PyTorch's caching
/// allocator hands the same addresses back) encodes each map once. A model's decode step calls one
/// prepared GEMM per shape with every layer's weight (32 or more distinct B addresses), and the
/// benchmark rotates up to 15 input copies past the L2: a slot that held fewer re-encoded A's and B's
/// maps on every call (host work, which the H200 bench did not show: docs/performance.md, "gemm_fp8").
const MAP_CACHE: usize = 64;

/// How each kernel argument is filled at launch.
#[derive(Debug, Clone, Copy)]
enum Arg {
    /// `ints[i]`.
    Int(usize),
    /// The address of tensor `i` (caller's, then scratch).
    Ptr(usize),
    /// Map slot `i`.
    Map(usize),
}

struct MapSlot {
    tensor: usize,
    geometry: MapGeometry,
    cache: Mutex<Vec<(u64, cu::CUtensorMap)>>,
}

/// One launch, bound to a layout.
struct Bound {
    kernel: Arc<Loaded>,
    grid: u32,
    ints: Vec<i32>,
    /// For each free parameter of the call, its index in `ints` (`None`: this launch takes none).
    free: Vec<Option<usize>>,
    args: Vec<Arg>,
    maps: Vec<MapSlot>,
}

/// A call prepared for one configuration and layout on one device (see the module documentation).
pub struct Prepared {
    ordinal: i32,
    /// The caller's tensors, then the scratch, in the order [`Prepared::launch`] takes addresses.
    tensors: Vec<TensorSpec>,
    callers: usize,
    /// Bytes each tensor's declared layout spans.
    spans: Vec<u64>,
    stages: Vec<Bound>,
    /// Parameters given per launch rather than fixed ([`Prepared::new`]'s `free`).
    free: Vec<String>,
    /// The kernels this preparation loaded on the device (their first use in the process).
    pub loads: Vec<KernelLoad>,
    /// Scratch the call keeps itself: arrival counters (`super::counters`; boxed: most calls have none).
    counters: Box<super::counters::OwnedCounters>,
}

// SAFETY: the driver handles inside (`Loaded`'s function, the encoded maps) are process-wide objects
// usable from any thread with the context current, which every use makes so; the map caches are behind
// mutexes and nothing else is mutated after construction.
unsafe impl Send for Prepared {}
unsafe impl Sync for Prepared {}

/// The multiprocessor count of CUDA device `ordinal` (asked once per process): what a configuration
/// chosen per device reads ([`kittens_kernels::problem::RunSettings::sms`]).
pub fn device_sms(ordinal: i32) -> Result<u32, CudaError> {
    in_context(ordinal, || multiprocessors(ordinal))
}

/// The catalog name of CUDA device `ordinal`'s model (`kittens_hw::gpu::for_device` of its product
/// name), `None` where the catalog lacks it: what a configuration chosen per device model reads
/// ([`kittens_kernels::problem::RunSettings::gpu`]: an H200 streams faster than an H100).
pub fn device_gpu(ordinal: i32) -> Result<Option<&'static str>, CudaError> {
    let name = in_context(ordinal, || product_name(ordinal))?;
    Ok(kittens_hw::gpu::for_device(&name).map(|g| g.name))
}

fn ir_key(k: &Kernel) -> String {
    let mut h = DefaultHasher::new();
    kittens_ir::serial::to_json(k).hash(&mut h);
    format!("ir {} {:016x}", k.name, h.finish())
}

impl Prepared {
    /// Lowers, compiles and loads `stages` on device `ordinal` (each tile program once per process)
    /// and checks `callers` against every launch's declared tensors (see the module documentation).
    /// A tensor a launch declares that `callers` does not name must be written by an earlier launch
    /// before a later one reads it: it becomes scratch, sized by its declaration.
    ///
    /// `free` names parameters whose values each launch passes ([`Prepared::launch`]'s `free`), e.g. a
    /// dropout seed and counter: each must be a parameter of some launch that no tensor's layout and
    /// no grid extent reads, so no value of it can change what was checked here.
    pub fn new(
        ordinal: i32,
        stages: &[StageSpec],
        callers: Vec<TensorSpec>,
        free: &[&str],
    ) -> Result<Prepared, LaunchError> {
        if stages.is_empty() {
            return Err(invalid("a call of no launches").into());
        }
        check_free(stages, free)?;
        for (i, t) in callers.iter().enumerate() {
            if callers[..i].iter().any(|u| u.name == t.name) {
                return Err(invalid(format!("tensor `{}` given twice", t.name)).into());
            }
        }
        let mut tensors = callers;
        let n_callers = tensors.len();
        for s in stages {
            let ordered = ordered_params(&s.kernel, &s.params)?;
            for g in &s.kernel.globals {
                if !tensors.iter().any(|t| t.name == g.name) {
                    let (shape, strides) = declared(&s.kernel, &g.name, &ordered)?;
                    tensors.push(TensorSpec {
                        name: g.name.clone(),
                        shape,
                        strides,
                        dtype: g.dtype,
                    });
                }
            }
        }
        for t in &tensors[..n_callers] {
            if !stages
                .iter()
                .any(|s| s.kernel.globals.iter().any(|g| g.name == t.name))
            {
                return Err(invalid(format!(
                    "tensor `{}`: no launch of this call takes a tensor of that name",
                    t.name
                ))
                .into());
            }
        }
        let mut spans = vec![0u64; tensors.len()];
        let mut loads = Vec::new();
        let bound = in_context(ordinal, || {
            let mut bound = Vec::with_capacity(stages.len());
            for s in stages {
                let (kernel, fresh) = kernel_on(ordinal, &ir_key(&s.kernel), &|| {
                    kittens_codegen::lower(&s.kernel, Target::Sm90a)
                        .map_err(|e| invalid(format!("lowering `{}`: {e}", s.kernel.name)))
                })?;
                if fresh {
                    loads.push(kernel.load.clone());
                }
                bound.push(
                    bind(kernel, s, &tensors, &mut spans, free, n_callers).map_err(
                        |e| match e {
                            LaunchError::Cuda(c) => c,
                            other => invalid(other.to_string()),
                        },
                    )?,
                );
            }
            Ok(bound)
        })?;
        let kernels: Vec<&Kernel> = stages.iter().map(|s| &s.kernel).collect();
        let owned = |i: usize| super::counters::is_counter(&kernels, &tensors[i].name);
        let counters = (n_callers..tensors.len())
            .filter(|&i| owned(i))
            .map(|i| (i, spans[i]))
            .collect();
        Ok(Prepared {
            ordinal,
            tensors,
            callers: n_callers,
            spans,
            stages: bound,
            free: free.iter().map(|f| f.to_string()).collect(),
            loads,
            counters: Box::new(super::counters::OwnedCounters::new(ordinal, counters)),
        })
    }

    /// Bytes of each scratch tensor, in the order [`Prepared::launch`] takes them after the caller's
    /// (0 for the counters the call keeps itself, whose addresses it ignores).
    pub fn scratch_bytes(&self) -> Vec<u64> {
        (self.callers..self.spans.len())
            .map(|i| {
                if self.counters.owns(i) {
                    0
                } else {
                    self.spans[i]
                }
            })
            .collect()
    }

    /// The tensors [`Prepared::launch`] takes addresses of, in order (the caller's, then the scratch).
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// Bytes each tensor's declared layout spans, in [`Prepared::tensors`]' order.
    pub fn spans(&self) -> &[u64] {
        &self.spans
    }

    /// Each launch's grid (blocks) and threads per block, in launch order.
    pub fn geometry(&self) -> Vec<(u32, u32)> {
        self.stages
            .iter()
            .map(|s| (s.grid, s.kernel.lowered.threads))
            .collect()
    }

    /// Each launch's kernel as loaded (name, compile report: registers, spills, shared memory).
    pub fn kernels(&self) -> Vec<&KernelLoad> {
        self.stages.iter().map(|s| &s.kernel.load).collect()
    }

    /// Asks the driver that each address of `ptrs` starts a range of the tensor's span inside one
    /// allocation of the prepared device (one `cuPointerGetAttributes` each): for callers whose memory
    /// no framework vouches for.
    pub fn check_memory(&self, ptrs: &[u64]) -> Result<(), LaunchError> {
        if ptrs.len() != self.tensors.len() {
            return Err(invalid(format!(
                "{} addresses for {} tensors",
                ptrs.len(),
                self.tensors.len()
            ))
            .into());
        }
        in_context(self.ordinal, || {
            for (i, ((t, &p), &span)) in self.tensors.iter().zip(ptrs).zip(&self.spans).enumerate()
            {
                if span > 0 && !self.counters.owns(i) {
                    check_pointer(&t.name, p, span, self.ordinal)?;
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Enqueues every launch on `stream` (a `CUstream` of device `ordinal`'s primary context, or 0)
    /// with the tensors at `ptrs` (the caller's, then the scratch, as [`Prepared::tensors`] lists).
    ///
    /// # Safety
    /// Each address must be live device memory of the prepared device holding at least the tensor's
    /// declared span, kept until the stream has run the launches; outputs must not overlap inputs
    /// unless the kernel reads each element before writing it.
    pub unsafe fn launch(
        &self,
        ptrs: &[u64],
        stream: u64,
        free: &[i64],
    ) -> Result<(), LaunchError> {
        if free.len() != self.free.len() {
            return Err(invalid(format!(
                "{} free parameter values for {:?}",
                free.len(),
                self.free
            ))
            .into());
        }
        let mut free32 = [0i32; 8];
        for (i, (&v, name)) in free.iter().zip(&self.free).enumerate() {
            free32[i] = i32::try_from(v).map_err(|_| LaunchError::Param {
                kernel: self.stages[0].kernel.lowered.ir.name.clone(),
                param: name.clone(),
                why: format!("{v} is outside the kernel's 32-bit parameter range"),
            })?;
        }
        if ptrs.len() != self.tensors.len() {
            return Err(invalid(format!(
                "{} addresses for {} tensors ({:?})",
                ptrs.len(),
                self.tensors.len(),
                self.tensors.iter().map(|t| &t.name).collect::<Vec<_>>()
            ))
            .into());
        }
        for (i, ((t, &p), &span)) in self.tensors.iter().zip(ptrs).zip(&self.spans).enumerate() {
            if self.counters.owns(i) {
                continue;
            }
            if span > 0 && (p == 0 || !p.is_multiple_of(ALIGN) || p.checked_add(span).is_none()) {
                return Err(LaunchError::Tensor {
                    kernel: self.stages[0].kernel.lowered.ir.name.clone(),
                    tensor: t.name.clone(),
                    why: format!(
                        "base {p:#x} is not a {ALIGN}-byte aligned address with {span} bytes after it"
                    ),
                });
            }
        }
        in_context(self.ordinal, || {
            // A launch after another of the call goes as its programmatic dependent where the
            // kernel waits for the grid before it (`Lowered::waits_for_previous_grid`): its launch
            // and setup overlap the previous kernel's end (the split-K reduction's, the key split's
            // merge), as cuBLAS's split-K does with its reduction.
            let mut after = false;
            let mut owned = ptrs.to_vec();
            self.counters.place(stream, &mut owned)?;
            let ptrs = &owned[..];
            for b in &self.stages {
                if b.grid == 0 {
                    continue;
                }
                let mut maps: Vec<cu::CUtensorMap> = Vec::with_capacity(b.maps.len());
                for m in &b.maps {
                    maps.push(m.get(ptrs[m.tensor])?);
                }
                let mut addrs: Vec<u64> = ptrs.to_vec();
                let mut ints = b.ints.clone();
                for (slot, &v) in b.free.iter().zip(&free32) {
                    if let Some(i) = *slot {
                        ints[i] = v;
                    }
                }
                let (mp, ap, ip) = (maps.as_mut_ptr(), addrs.as_mut_ptr(), ints.as_mut_ptr());
                let mut pointers: Vec<*mut c_void> = b
                    .args
                    .iter()
                    .map(|&a| {
                        // SAFETY: every index was bounded by its vector's length when bound.
                        unsafe {
                            match a {
                                Arg::Int(i) => ip.add(i).cast::<c_void>(),
                                Arg::Ptr(i) => ap.add(i).cast::<c_void>(),
                                Arg::Map(i) => mp.add(i).cast::<c_void>(),
                            }
                        }
                    })
                    .collect();
                let l = &b.kernel.lowered;
                // SAFETY: one pointer per argument in the lowering's order and types, alive until
                // the call returns; the caller keeps the memory and the stream alive.
                unsafe {
                    launch_raw(
                        b.kernel.function,
                        (b.grid, 1, 1),
                        (l.threads, 1, 1),
                        (l.dynamic_shared_bytes(), l.cluster),
                        stream as cu::CUstream,
                        &mut pointers,
                        after && l.waits_for_previous_grid,
                    )?
                };
                after = true;
            }
            Ok(())
        })?;
        Ok(())
    }
}

impl MapSlot {
    fn get(&self, ptr: u64) -> Result<cu::CUtensorMap, CudaError> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, m)) = cache.iter().find(|(p, _)| *p == ptr) {
            return Ok(*m);
        }
        let g = &self.geometry;
        let m = encode_tiled(
            ptr,
            MapType::of(g.dtype)?,
            &g.dims,
            &g.strides,
            &g.boxes,
            g.swizzle,
        )?;
        if cache.len() == MAP_CACHE {
            cache.remove(0);
        }
        cache.push((ptr, m));
        Ok(m)
    }
}

#[cfg(test)]
mod tests;

/// The launches of registry entry `entry` at `p` on sm_90a, as prepared-call stages: the entry's
/// `KernelProblem::stages` with each launch's parameters by name. No size budget (that bounds the
/// runner's random inputs and f64 reference, not a launch on the caller's memory).
pub fn registry_stages(
    entry: &kittens_kernels::registry::KernelEntry,
    p: &dyn kittens_kernels::problem::KernelProblem,
) -> Result<Vec<StageSpec>, kittens_kernels::KernelError> {
    let plan = kittens_kernels::problem::Plan {
        launch: p.launch()?,
        what: entry.name.to_string(),
        work: None,
        shape: serde_json::Value::Null,
    };
    Ok(p.stages(Target::Sm90a, &plan)?
        .into_iter()
        .map(|s| StageSpec {
            params: s
                .kernel
                .params
                .iter()
                .zip(&s.launch.params)
                .map(|(d, &v)| (d.name.clone(), v))
                .collect(),
            kernel: s.kernel,
        })
        .collect())
}

/// What [`host_loop`] measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HostLoop {
    pub calls: usize,
    /// Wall clock of the loop (host time, and the GPU's where it is the slower) over the calls, in µs.
    pub us_per_call: f64,
    /// Launches per call.
    pub launches: usize,
}

/// The per-call time a Rust caller of a prepared call sees: `stages` prepared on device `ordinal`
/// over zeroed device buffers of their declared layouts, `calls` calls enqueued on the default stream
/// and one synchronisation at the end (what `python -m kittens.bench overhead` measures for the torch
/// ops), after `calls / 10 + 1` warm-up calls.
pub fn host_loop(
    ordinal: i32,
    stages: &[StageSpec],
    calls: usize,
) -> Result<HostLoop, LaunchError> {
    use super::driver::check;
    let calls = calls.max(1);
    let p = Prepared::new(ordinal, stages, Vec::new(), &[])?;
    let r = in_context(ordinal, || {
        let mut ptrs = Vec::with_capacity(p.spans.len());
        let free = |ptrs: &[u64]| {
            for &q in ptrs {
                // SAFETY: allocated below with cuMemAlloc, freed once.
                unsafe { cu::cuMemFree_v2(q) };
            }
        };
        for &bytes in &p.spans {
            let mut q = 0;
            let bytes = usize::try_from(bytes).map_err(invalid)?;
            // SAFETY: out-parameter; the buffer is zeroed before any launch reads it.
            let r = unsafe {
                check(cu::cuMemAlloc_v2(&mut q, bytes.max(16)), "cuMemAlloc")
                    .and_then(|_| check(cu::cuMemsetD8_v2(q, 0, bytes.max(16)), "cuMemsetD8"))
            };
            if let Err(e) = r {
                free(&ptrs);
                return Err(e);
            }
            ptrs.push(q);
        }
        let run = |n: usize| -> Result<f64, CudaError> {
            let t = std::time::Instant::now();
            for _ in 0..n {
                // SAFETY: every buffer holds its tensor's declared span; the stream is synchronised
                // before they are freed.
                unsafe { p.launch(&ptrs, 0, &[]) }.map_err(|e| invalid(e.to_string()))?;
            }
            // SAFETY: no arguments.
            check(unsafe { cu::cuCtxSynchronize() }, "cuCtxSynchronize")?;
            Ok(t.elapsed().as_secs_f64())
        };
        let timed = run(calls / 10 + 1).and_then(|_| run(calls));
        free(&ptrs);
        timed
    })?;
    Ok(HostLoop {
        calls,
        us_per_call: r * 1e6 / calls as f64,
        launches: stages.len(),
    })
}
