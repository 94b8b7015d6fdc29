//! Sizes checked before anything reaches the driver: buffer sizes against the shapes a call is given,
//! the driver's launch and tensor-map limits, host and device memory before a benchmark allocates, and
//! checked conversions to the driver's 32-bit integers. Pure functions, so every check runs (and is
//! tested) on a machine without a GPU.

/// A size that does not fit what it is given to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{what}: the size overflows 64 bits")]
    Overflow { what: String },
    #[error("{what} is {value}, outside {min}..={max}")]
    OutOfRange {
        what: String,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("{what} needs {need} bytes, the buffer has {have}")]
    BufferTooSmall { what: String, need: u64, have: u64 },
    #[error(
        "{what} needs {} of host memory ({} available, MemAvailable in /proc/meminfo) and {} of \
         device memory ({} free, cuMemGetInfo)", gib(*host_need), gib(*host_available),
        gib(*device_need), gib(*device_free)
    )]
    OutOfMemory {
        what: String,
        host_need: u64,
        host_available: u64,
        device_need: u64,
        device_free: u64,
    },
}

/// Bytes as GiB with two decimals (and the exact count), for messages.
fn gib(bytes: u64) -> String {
    format!(
        "{:.2} GiB ({bytes} bytes)",
        bytes as f64 / (1u64 << 30) as f64
    )
}

/// `v` as an `i32` within `min..=i32::MAX` (cuBLAS dimensions, driver attributes).
pub fn to_i32(what: &str, v: u64, min: u64) -> Result<i32, SizeError> {
    match i32::try_from(v) {
        Ok(x) if v >= min => Ok(x),
        _ => Err(SizeError::OutOfRange {
            what: what.to_string(),
            value: v,
            min,
            max: i32::MAX as u64,
        }),
    }
}

/// `v` as a `u32` within `min..=max` (kernel arguments, launch dimensions).
pub fn to_u32(what: &str, v: u64, min: u64, max: u32) -> Result<u32, SizeError> {
    match u32::try_from(v) {
        Ok(x) if v >= min && x <= max => Ok(x),
        _ => Err(SizeError::OutOfRange {
            what: what.to_string(),
            value: v,
            min,
            max: max as u64,
        }),
    }
}

/// The product of `dims` times `elem_bytes`, checked.
pub fn bytes_of(what: &str, dims: &[u64], elem_bytes: u64) -> Result<u64, SizeError> {
    dims.iter()
        .try_fold(elem_bytes, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| SizeError::Overflow {
            what: what.to_string(),
        })
}

/// Checks that a buffer of `have` bytes holds a `rows` × `cols` matrix of `elem_bytes` elements.
pub fn check_buffer(
    what: &str,
    rows: u64,
    cols: u64,
    elem_bytes: u64,
    have: usize,
) -> Result<(), SizeError> {
    let need = bytes_of(what, &[rows, cols], elem_bytes)?;
    let have = have as u64;
    if need > have {
        return Err(SizeError::BufferTooSmall {
            what: format!("{what} ({rows}x{cols})"),
            need,
            have,
        });
    }
    Ok(())
}

/// The dimensions of a row-major bf16 `C = A·Bᵀ` (A M×K, B N×K, C M×N) as cuBLAS takes them, after
/// checking each buffer holds its operand: `(m, n, k)` as `i32`, each at least 1.
pub fn gemm_abt_dims(
    (m, n, k): (usize, usize, usize),
    a_bytes: usize,
    b_bytes: usize,
    c_bytes: usize,
) -> Result<(i32, i32, i32), SizeError> {
    let (m, n, k) = (m as u64, n as u64, k as u64);
    let dims = (to_i32("M", m, 1)?, to_i32("N", n, 1)?, to_i32("K", k, 1)?);
    check_buffer("A", m, k, 2, a_bytes)?;
    check_buffer("B", n, k, 2, b_bytes)?;
    check_buffer("C", m, n, 2, c_bytes)?;
    Ok(dims)
}

/// Launch dimensions within the driver's limits (CUDA C Programming Guide, "Compute Capabilities",
/// Table "Technical Specifications": grid x up to 2³¹−1, y and z up to 65535; block x and y up to 1024,
/// z up to 64, at most 1024 threads a block).
pub fn check_launch(grid: (u32, u32, u32), block: (u32, u32, u32)) -> Result<(), SizeError> {
    let limit = |what: &str, v: u32, max: u32| to_u32(what, v as u64, 1, max).map(|_| ());
    limit("grid x", grid.0, i32::MAX as u32)?;
    limit("grid y", grid.1, 65_535)?;
    limit("grid z", grid.2, 65_535)?;
    limit("block x", block.0, 1024)?;
    limit("block y", block.1, 1024)?;
    limit("block z", block.2, 64)?;
    let threads = bytes_of(
        "threads per block",
        &[block.0 as u64, block.1 as u64],
        block.2 as u64,
    )?;
    to_u32("threads per block", threads, 1, 1024).map(|_| ())
}

/// A 2-D bf16 tensor map's shape within `cuTensorMapEncodeTiled`'s limits (CUDA Driver API, "Tensor
/// Map Object Management": dimensions 1..=2³², box sides 1..=256, a row pitch that is a multiple of 16
/// bytes and below 2⁴⁰) over a buffer that holds it.
pub fn check_tensor_map_2d(
    rows: u64,
    cols: u64,
    box_rows: u32,
    box_cols: u32,
    buf_bytes: usize,
) -> Result<(), SizeError> {
    check_tensor_map_2d_of(rows, cols, box_rows, box_cols, 2, buf_bytes)
}

/// [`check_tensor_map_2d`] for elements of `elem_bytes` (1 for fp8, whose rows then need a multiple
/// of 16 elements).
pub fn check_tensor_map_2d_of(
    rows: u64,
    cols: u64,
    box_rows: u32,
    box_cols: u32,
    elem_bytes: u64,
    buf_bytes: usize,
) -> Result<(), SizeError> {
    for (what, v) in [("tensor map rows", rows), ("tensor map columns", cols)] {
        if !(1..=1u64 << 32).contains(&v) {
            return Err(SizeError::OutOfRange {
                what: what.into(),
                value: v,
                min: 1,
                max: 1 << 32,
            });
        }
    }
    to_u32("tensor map box rows", box_rows as u64, 1, 256)?;
    to_u32("tensor map box columns", box_cols as u64, 1, 256)?;
    let pitch = bytes_of("tensor map row pitch", &[cols], elem_bytes)?;
    if !pitch.is_multiple_of(16) || pitch >= 1 << 40 {
        return Err(SizeError::OutOfRange {
            what: format!("tensor map row pitch {pitch} bytes (a multiple of 16)"),
            value: pitch,
            min: 16,
            max: (1 << 40) - 16,
        });
    }
    check_buffer("tensor map", rows, cols, elem_bytes, buf_bytes)
}

/// A tensor map of 1 to 5 dimensions (innermost first, unit stride) of `elem`-byte elements within
/// `cuTensorMapEncodeTiled`'s limits — dimensions 1..=2³², box sides 1..=256, byte strides multiples of
/// 16 below 2⁴⁰ — whose farthest element lies inside a buffer of `buf_bytes`.
pub fn check_tensor_map_nd(
    dims: &[u64],
    strides: &[u64],
    boxes: &[u32],
    elem: u64,
    buf_bytes: usize,
) -> Result<(), SizeError> {
    let rank = dims.len();
    to_u32("tensor map rank", rank as u64, 1, 5)?;
    to_u32(
        "tensor map strides + 1",
        strides.len() as u64 + 1,
        rank as u64,
        rank as u32,
    )?;
    to_u32(
        "tensor map box rank",
        boxes.len() as u64,
        rank as u64,
        rank as u32,
    )?;
    for &d in dims {
        if !(1..=1u64 << 32).contains(&d) {
            return Err(SizeError::OutOfRange {
                what: "tensor map dimension".into(),
                value: d,
                min: 1,
                max: 1 << 32,
            });
        }
    }
    for &b in boxes {
        to_u32("tensor map box side", b as u64, 1, 256)?;
    }
    // The last element's byte offset: (dims[0] - 1) * elem + Σ (dims[i] - 1) * strides[i - 1].
    let overflow = || SizeError::Overflow {
        what: "tensor map extent".into(),
    };
    let mut last = (dims[0] - 1).checked_mul(elem).ok_or_else(overflow)?;
    for (&d, &st) in dims[1..].iter().zip(strides) {
        if !st.is_multiple_of(16) || st >= 1 << 40 {
            return Err(SizeError::OutOfRange {
                what: format!("tensor map stride {st} bytes (a multiple of 16)"),
                value: st,
                min: 16,
                max: (1 << 40) - 16,
            });
        }
        last = (d - 1)
            .checked_mul(st)
            .and_then(|x| x.checked_add(last))
            .ok_or_else(overflow)?;
    }
    let need = last.checked_add(elem).ok_or_else(overflow)?;
    if need > buf_bytes as u64 {
        return Err(SizeError::BufferTooSmall {
            what: "tensor map".into(),
            need,
            have: buf_bytes as u64,
        });
    }
    Ok(())
}

/// The memory one benchmark shape needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNeed {
    pub host: u64,
    pub device: u64,
}

/// Memory for `C = A·Bᵀ` at (m, n, k) in bf16 with `copies` copies of A and B on the device (the L2
/// rotation) and two C (ours and the reference); on the host one A, one B and both C downloaded.
pub fn gemm_memory_need(
    (m, n, k): (usize, usize, usize),
    copies: u64,
) -> Result<MemoryNeed, SizeError> {
    let what = format!("GEMM {m}x{n}x{k}");
    let (m, n, k) = (m as u64, n as u64, k as u64);
    let overflow = || SizeError::Overflow { what: what.clone() };
    let ab = bytes_of(&what, &[m, k], 2)?
        .checked_add(bytes_of(&what, &[n, k], 2)?)
        .ok_or_else(overflow)?;
    let c2 = bytes_of(&what, &[m, n, 2], 2)?;
    Ok(MemoryNeed {
        host: ab.checked_add(c2).ok_or_else(overflow)?,
        device: ab
            .checked_mul(copies)
            .and_then(|x| x.checked_add(c2))
            .ok_or_else(overflow)?,
    })
}

/// Copies of A and B that together span at least `l2_multiple` L2s (at least 2), for an input set of
/// `(m + n)·k` bf16 elements.
pub fn rotation_copies(
    (m, n, k): (usize, usize, usize),
    l2_bytes: u64,
    l2_multiple: u64,
) -> Result<u64, SizeError> {
    let what = format!("GEMM {m}x{n}x{k} input copies");
    let set = bytes_of(&what, &[(m as u64).saturating_add(n as u64), k as u64], 2)?;
    let span = l2_bytes
        .checked_mul(l2_multiple)
        .ok_or(SizeError::Overflow { what })?;
    Ok(span.div_ceil(set.max(1)).max(2))
}

/// Refuses a shape whose need exceeds what the host has available or the device has free.
pub fn check_memory(
    what: &str,
    need: MemoryNeed,
    host_available: u64,
    device_free: u64,
) -> Result<(), SizeError> {
    if need.host > host_available || need.device > device_free {
        return Err(SizeError::OutOfMemory {
            what: what.to_string(),
            host_need: need.host,
            host_available,
            device_need: need.device,
            device_free,
        });
    }
    Ok(())
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line["MemAvailable:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

/// The host memory available now (`MemAvailable`, Linux `/proc/meminfo`).
pub fn host_mem_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BSHD attention tensor `[b=2, s=100, h=3, d=64]` as the 4-d map (d, s, b, h): fits exactly in
    /// its own buffer, not in one element less; strides must be 16-byte multiples; rank at most 5.
    #[test]
    fn tensor_map_nd_limits() {
        let (b, s, h, d) = (2u64, 100u64, 3u64, 64u64);
        let dims = [d, s, b, h];
        let strides = [h * d * 2, s * h * d * 2, d * 2];
        let bytes = (b * s * h * d * 2) as usize;
        check_tensor_map_nd(&dims, &strides, &[64, 128, 1, 1], 2, bytes).unwrap();
        assert!(matches!(
            check_tensor_map_nd(&dims, &strides, &[64, 128, 1, 1], 2, bytes - 2),
            Err(SizeError::BufferTooSmall { .. })
        ));
        let odd = [h * d * 2 + 2, s * h * d * 2, d * 2];
        assert!(check_tensor_map_nd(&dims, &odd, &[64, 128, 1, 1], 2, bytes * 2).is_err());
        assert!(check_tensor_map_nd(&dims, &strides, &[64, 257, 1, 1], 2, bytes).is_err());
        assert!(check_tensor_map_nd(&[1; 6], &[16; 5], &[1; 6], 2, 1 << 20).is_err());
        assert!(check_tensor_map_nd(&dims, &strides[..2], &[64, 128, 1, 1], 2, bytes).is_err());
    }

    #[test]
    fn cublas_dimensions_are_checked_against_buffers() {
        let (m, n, k) = (300, 200, 72);
        let (a, b, c) = (m * k * 2, n * k * 2, m * n * 2);
        assert_eq!(gemm_abt_dims((m, n, k), a, b, c), Ok((300, 200, 72)));
        // One byte short on each operand in turn names the operand and both sizes.
        let short = gemm_abt_dims((m, n, k), a, b - 1, c).unwrap_err();
        assert_eq!(
            short,
            SizeError::BufferTooSmall {
                what: "B (200x72)".into(),
                need: 28_800,
                have: 28_799
            }
        );
        assert!(matches!(
            gemm_abt_dims((m, n, k), a, b, c - 2),
            Err(SizeError::BufferTooSmall { .. })
        ));
        // Sizes past i32 (what `as i32` silently wrapped) and zero are refused.
        assert!(matches!(
            gemm_abt_dims((1 << 31, 8, 8), usize::MAX, usize::MAX, usize::MAX),
            Err(SizeError::OutOfRange {
                value: 2_147_483_648,
                ..
            })
        ));
        assert!(matches!(
            gemm_abt_dims((0, 8, 8), a, b, c),
            Err(SizeError::OutOfRange { value: 0, .. })
        ));
        // A product past 64 bits is an overflow, not a wrapped small number.
        assert!(matches!(
            bytes_of("x", &[u64::MAX / 2, 3], 2),
            Err(SizeError::Overflow { .. })
        ));
    }

    #[test]
    fn checked_conversions() {
        assert_eq!(to_u32("x", 7, 1, 10), Ok(7));
        assert!(to_u32("x", 11, 1, 10).is_err());
        assert!(to_u32("x", 1 << 32, 0, u32::MAX).is_err());
        assert_eq!(to_i32("x", i32::MAX as u64, 0), Ok(i32::MAX));
        assert!(to_i32("x", i32::MAX as u64 + 1, 0).is_err());
    }

    #[test]
    fn launch_limits() {
        assert!(check_launch((132, 1, 1), (384, 1, 1)).is_ok());
        assert!(check_launch((i32::MAX as u32, 65_535, 65_535), (1024, 1, 1)).is_ok());
        assert!(check_launch((0, 1, 1), (128, 1, 1)).is_err());
        assert!(check_launch((1 << 31, 1, 1), (128, 1, 1)).is_err());
        assert!(check_launch((1, 65_536, 1), (128, 1, 1)).is_err());
        assert!(
            check_launch((1, 1, 1), (32, 32, 2)).is_err(),
            "2048 threads"
        );
        assert!(check_launch((1, 1, 1), (1, 1, 65)).is_err());
    }

    #[test]
    fn tensor_map_limits() {
        let buf = 1000 * 1032 * 2;
        assert!(check_tensor_map_2d(1000, 1032, 128, 64, buf).is_ok());
        assert!(matches!(
            check_tensor_map_2d(1000, 1032, 128, 64, buf - 1),
            Err(SizeError::BufferTooSmall { .. })
        ));
        // 1030 bf16 columns = 2060-byte rows: not a multiple of 16.
        assert!(check_tensor_map_2d(1000, 1030, 128, 64, buf).is_err());
        assert!(check_tensor_map_2d(1000, 1032, 512, 64, buf).is_err());
        assert!(check_tensor_map_2d(0, 1032, 128, 64, buf).is_err());
        // rows·cols·2 past 64 bits: an error, where `(rows * cols * 2) as usize` wrapped.
        assert!(check_tensor_map_2d(1 << 32, 1 << 32, 64, 64, usize::MAX).is_err());
    }

    #[test]
    fn memory_is_checked_before_allocating() {
        // 250000³: A and B are 125 GB each; even one copy exceeds an 80 GB GPU and most hosts.
        let need = gemm_memory_need((250_000, 250_000, 250_000), 2).unwrap();
        assert_eq!(need.host, 4 * 250_000u64 * 250_000 * 2);
        assert_eq!(
            need.device,
            2 * 2 * 250_000u64 * 250_000 * 2 + 2 * 250_000u64 * 250_000 * 2
        );
        let e = check_memory("GEMM 250000x250000x250000", need, 64 << 30, 79 << 30).unwrap_err();
        let msg = e.to_string();
        // The message names both needs and both amounts available.
        for s in [
            "500000000000 bytes",
            "68719476736 bytes",
            "84825604096 bytes",
            "750000000000 bytes",
        ] {
            assert!(msg.contains(s), "{s} not in: {msg}");
        }
        // 4096³ with the rotation copies fits an H100 and a 64 GiB host.
        let copies = rotation_copies((4096, 4096, 4096), 50 << 20, 4).unwrap();
        assert_eq!(copies, 4, "4 x 50 MiB over 64 MiB sets");
        let need = gemm_memory_need((4096, 4096, 4096), copies).unwrap();
        assert!(check_memory("4096", need, 64 << 30, 79 << 30).is_ok());
        // Device short alone, or host short alone, is refused.
        assert!(check_memory("x", need, need.host, need.device - 1).is_err());
        assert!(check_memory("x", need, need.host - 1, need.device).is_err());
        // usize::MAX sizes overflow instead of wrapping into a small allocation.
        assert!(gemm_memory_need((usize::MAX, 2, 2), 1).is_err());
        assert_eq!(rotation_copies((8, 8, 8), 0, 4), Ok(2));
    }

    #[test]
    fn reads_mem_available() {
        let text = "MemTotal:       131072000 kB\nMemFree:         1000 kB\n\
                    MemAvailable:   120000000 kB\nBuffers: 5 kB\n";
        assert_eq!(parse_mem_available(text), Some(120_000_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
        // This machine's own figure is there and positive (Linux).
        assert!(host_mem_available().is_some_and(|b| b > 0));
    }
}
