//! Timing the memory-bound strip programs (`layernorm`, `rotary`) on the GPU at several
//! configurations in one run, with the device's copy bandwidth measured in the same run: what
//! `kittens bench layernorm|rotary` prints. No vendor library does these, so the comparison with
//! PyTorch (eager and `torch.compile`) is the Python package's (`python -m kittens.bench`); this
//! harness exists to choose the configuration (values per lane, waves per row, rows per wave) by
//! measurement. Correctness is checked elsewhere (the GPU tests compare with the CPU interpreter).

use std::rc::Rc;

use kittens_codegen::Lowered;
use serde::Serialize;

use super::args::PackedArgs;
use super::bench::median;
use super::driver::{Device, Event, Stream};
use super::{compile, invalid, CudaError};

/// One configuration of one problem.
#[derive(Debug, Clone)]
pub struct StripCase {
    /// What the row is called (problem and configuration).
    pub label: String,
    pub lowered: Lowered,
    /// The tile program's parameters by name.
    pub params: Vec<(String, i64)>,
    /// Bytes the kernel must move at these parameters (inputs read once, outputs written once).
    pub bytes: u64,
}

/// What one case measured.
#[derive(Debug, Clone, Serialize)]
pub struct StripRow {
    pub label: String,
    pub kernel: String,
    pub registers: u32,
    pub spills: u32,
    pub threads: u32,
    pub ms: f64,
    pub gbs: f64,
    pub of_copy: f64,
}

/// The report of one sweep.
#[derive(Debug, Clone, Serialize)]
pub struct StripReport {
    pub device: String,
    pub copy_gbs: f64,
    pub iters: usize,
    pub rows: Vec<StripRow>,
}

/// Bytes a global of the tile program spans at `params` (`(Σ (dim − 1)·stride + 1) · element size`).
fn global_bytes(l: &Lowered, g: usize, params: &[i64]) -> Result<usize, CudaError> {
    let decl = &l.ir.globals[g];
    let env = kittens_ir::Env {
        params,
        vars: &[],
        block: &[],
        wave: 0,
    };
    let mut last = 0u64;
    for (d, s) in decl.dims.iter().zip(&decl.strides) {
        let (d, s) = (d.eval(&env), s.eval(&env));
        let (Some(d), Some(s)) = (
            d.and_then(|x| u64::try_from(x).ok()),
            s.and_then(|x| u64::try_from(x).ok()),
        ) else {
            return Err(invalid(format!(
                "`{}`: a dimension does not evaluate",
                decl.name
            )));
        };
        if d == 0 {
            return Ok(0);
        }
        last = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(last))
            .ok_or_else(|| invalid(format!("`{}` overflows", decl.name)))?;
    }
    let bytes = (last + 1)
        .checked_mul(u64::from(decl.dtype.bytes()))
        .ok_or_else(|| invalid(format!("`{}` overflows", decl.name)))?;
    usize::try_from(bytes).map_err(|_| invalid(format!("`{}` is too large", decl.name)))
}

/// Median milliseconds of `iters` launches of `f` on `stream` (events around each), after `warmup`.
fn time(
    stream: &Stream,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    for _ in 0..warmup {
        f()?;
    }
    let (start, end) = (Event::new()?, Event::new()?);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters.max(1) {
        start.record(stream)?;
        f()?;
        end.record(stream)?;
        stream.synchronize()?;
        times.push(start.elapsed_ms(&end)? as f64);
    }
    Ok(median(&mut times))
}

/// GB/s of a device-to-device copy of a 1 GiB buffer (bytes read + bytes written).
pub fn copy_bandwidth(dev: &Rc<Device>, stream: &Stream, iters: usize) -> Result<f64, CudaError> {
    let n = 1usize << 30;
    let src = dev.alloc(n)?;
    let mut dst = dev.alloc(n)?;
    let ms = time(stream, 3, iters, || dst.copy_from(&src))?;
    Ok(2.0 * n as f64 / ms / 1e6)
}

/// Times every case on device 0 (buffers of 1.0 in bf16: timing only), and the copy bandwidth first.
pub fn run_strip_sweep(cases: &[StripCase], iters: usize) -> Result<StripReport, CudaError> {
    let dev = Device::open(0)?;
    let stream = Stream::new()?;
    let copy_gbs = copy_bandwidth(&dev, &stream, iters)?;
    let mut rows = Vec::new();
    for c in cases {
        let l = &c.lowered;
        let values: Vec<(&str, i64)> = c.params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let ordered: Vec<i64> =
            l.ir.params
                .iter()
                .map(|p| values.iter().find(|(n, _)| *n == p.name).map(|(_, v)| *v))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid(format!("{}: a parameter is missing", c.label)))?;
        let mut bufs = Vec::new();
        for g in 0..l.ir.globals.len() {
            let mut b = dev.alloc(global_bytes(l, g, &ordered)?.max(16))?;
            b.fill_u16(0x3f80)?;
            bufs.push(b);
        }
        let image = compile(&l.source, &l.entry, l.target.name(), 0)?;
        let module = dev.load_module(&image.cubin)?;
        let function = module.function(&l.entry, 0)?;
        let by_name = |name: &str| -> Result<u64, CudaError> {
            let i =
                l.ir.globals
                    .iter()
                    .position(|g| g.name == name)
                    .ok_or_else(|| invalid(format!("no tensor `{name}`")))?;
            Ok(bufs[i].ptr())
        };
        let mut args = PackedArgs::pack(l, &values, |_| Err(invalid("no tensor maps")), by_name)?;
        let mut pointers = args.pointers();
        let grid = l
            .blocks(&values, dev.multiprocessors)
            .ok_or_else(|| invalid("grid extents"))?;
        let ms = time(&stream, 5, iters, || {
            // SAFETY: one pointer per argument in the lowering's order and types; every buffer spans
            // its tensor at these parameters (`global_bytes`) and lives until the sweep returns.
            unsafe { function.launch((grid, 1, 1), (l.threads, 1, 1), &stream, &mut pointers) }
        })?;
        drop(bufs);
        let gbs = c.bytes as f64 / ms / 1e6;
        rows.push(StripRow {
            label: c.label.clone(),
            kernel: l.entry.clone(),
            registers: image.report.registers,
            spills: image.report.spill_stores + image.report.spill_loads,
            threads: l.threads,
            ms,
            gbs,
            of_copy: gbs / copy_gbs,
        });
    }
    Ok(StripReport {
        device: dev.name.clone(),
        copy_gbs,
        iters,
        rows,
    })
}
