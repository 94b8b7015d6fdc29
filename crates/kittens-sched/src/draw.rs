//! Pictures of a grid order in the style of seed 000 Fig. 5 / Fig. 18: the output tile grid with the
//! tiles of the first dispatch round coloured by the XCD that runs them. A text map for terminals and
//! an RGB PNG (a minimal encoder with stored deflate blocks, enough for these small images).

use crate::remap::GridOrder;
use crate::SchedError;

/// Most tiles a map may have (one entry each; a text map prints one character per tile).
pub const MAX_MAP_TILES: u64 = 1 << 22;
/// Most pixels a picture may have: 2^24 RGB pixels are 48 MiB, e.g. 4096 × 4096.
pub const MAX_PIXELS: u64 = 1 << 24;

/// XCD of each tile in the first dispatch round (`None` for tiles of later rounds), row by row.
pub fn first_round(
    rows: u64,
    cols: u64,
    n_xcd: u64,
    cus: u64,
    order: GridOrder,
) -> Result<Vec<Vec<Option<u64>>>, SchedError> {
    let tiles = rows as u128 * cols as u128;
    SchedError::check_budget("a map", tiles, "tiles", "grid map", MAX_MAP_TILES, "")?;
    order.check(rows, cols, n_xcd)?;
    let mut grid = vec![vec![None; cols as usize]; rows as usize];
    for id in 0..cus.min(rows * cols) {
        let (r, c) = order.tile(id, rows, cols, n_xcd);
        grid[r as usize][c as usize] = Some(id % n_xcd.max(1));
    }
    Ok(grid)
}

/// One character per tile: the XCD number (0–9, then a–z) in the first round, `.` otherwise.
pub fn text_map(grid: &[Vec<Option<u64>>]) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = String::new();
    for row in grid {
        for cell in row {
            out.push(match cell {
                Some(x) => DIGITS.get(*x as usize).copied().unwrap_or(b'#') as char,
                None => '.',
            });
        }
        out.push('\n');
    }
    out
}

/// Distinct colours for up to 8 XCDs (then cycled).
const PALETTE: [[u8; 3]; 8] = [
    [230, 25, 75],
    [60, 180, 75],
    [0, 130, 200],
    [245, 130, 48],
    [145, 30, 180],
    [70, 200, 200],
    [240, 50, 230],
    [190, 170, 30],
];

/// RGB pixels of the map, `cell` pixels per tile with a one-pixel grid line; at most [`MAX_PIXELS`].
pub fn render_rgb(grid: &[Vec<Option<u64>>], cell: u32) -> Result<(u32, u32, Vec<u8>), SchedError> {
    if cell == 0 {
        return Err(SchedError::Invalid(
            "a cell must be at least one pixel".into(),
        ));
    }
    let rows = grid.len() as u64;
    let cols = grid.first().map_or(0, |r| r.len()) as u64;
    // In u128 none of these products wraps.
    let (w, h) = (
        cols as u128 * cell as u128 + 1,
        rows as u128 * cell as u128 + 1,
    );
    let what = format!("an image of {w}x{h}");
    let hint = "; use a smaller cell";
    SchedError::check_budget(what, w * h, "pixels", "picture", MAX_PIXELS, hint)?;
    let (w, h) = (w as u32, h as u32);
    let mut px = vec![0u8; (w as usize) * (h as usize) * 3];
    for y in 0..h {
        for x in 0..w {
            let on_line = x % cell == 0 || y % cell == 0;
            let rgb = if on_line {
                [60, 60, 60]
            } else {
                match grid[(y / cell) as usize][(x / cell) as usize] {
                    Some(xcd) => PALETTE[xcd as usize % PALETTE.len()],
                    None => [235, 235, 235],
                }
            };
            let i = ((y * w + x) * 3) as usize;
            px[i..i + 3].copy_from_slice(&rgb);
        }
    }
    Ok((w, h, px))
}

/// Encode 8-bit RGB pixels as a PNG file (filter 0 on every scanline, stored deflate blocks).
pub fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(rgb.len() + height as usize);
    for row in rgb.chunks(width as usize * 3) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit, truecolour, deflate, filter 0, no interlace
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// zlib stream of stored (uncompressed) deflate blocks, RFC 1950/1951.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(65535).collect()
    };
    for (i, b) in blocks.iter().enumerate() {
        out.push(u8::from(i + 1 == blocks.len()));
        let len = b.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(b);
    }
    let (mut a, mut s) = (1u32, 0u32);
    for &byte in data {
        a = (a + byte as u32) % 65521;
        s = (s + a) % 65521;
    }
    out.extend_from_slice(&((s << 16) | a).to_be_bytes());
    out
}

/// CRC-32 (IEEE, reflected, polynomial 0xEDB88320) as PNG chunks require.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC-32 check value of "123456789" is 0xCBF43926 (the standard's test vector).
    #[test]
    fn crc_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn first_round_has_one_tile_per_cu() {
        let g = first_round(
            48,
            36,
            8,
            256,
            GridOrder::Xcd {
                window: 5,
                chunk: 25,
            },
        )
        .unwrap();
        let coloured: Vec<u64> = g.iter().flatten().flatten().copied().collect();
        assert_eq!(coloured.len(), 256);
        for x in 0..8 {
            assert_eq!(coloured.iter().filter(|&&c| c == x).count(), 32);
        }
    }
}
