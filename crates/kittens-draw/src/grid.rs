//! Pictures of a grid order in the style of HipKittens Fig. 5 / Fig. 18: the output tile grid with the
//! tiles of the first dispatch round coloured by the XCD that runs them, as a text map for terminals
//! or RGB pixels for [`crate::png`].

use kittens_grid::remap::GridOrder;
use kittens_grid::GridError;

/// Most tiles a map may have (one entry each; a text map prints one character per tile).
pub const MAX_MAP_TILES: u64 = 1 << 22;
/// Most pixels a picture may have: 2^24 RGB pixels are 48 MiB, e.g. 4096 × 4096.
pub const MAX_PIXELS: u64 = 1 << 24;

/// XCD of each tile in the first dispatch round (`None` for tiles of later rounds), row by row, when
/// blocks go to the `n_xcd` XCDs round-robin by launch id. Refused: a grid over [`MAX_MAP_TILES`], an
/// order whose products overflow, an order that is not 2-d.
pub fn first_round(
    rows: u64,
    cols: u64,
    n_xcd: u64,
    cus: u64,
    order: GridOrder,
) -> Result<Vec<Vec<Option<u64>>>, GridError> {
    let tiles = rows as u128 * cols as u128;
    GridError::check_budget("a map", tiles, "tiles", "grid map", MAX_MAP_TILES, "")?;
    order.check(rows, cols)?;
    let not_2d = || GridError::Invalid(format!("{} is not a 2-d grid order", order.label()));
    let mut grid = vec![vec![None; cols as usize]; rows as usize];
    for id in 0..cus.min(rows * cols) {
        let (r, c) = order.tile(id, rows, cols).ok_or_else(not_2d)?;
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
pub fn render_rgb(grid: &[Vec<Option<u64>>], cell: u32) -> Result<(u32, u32, Vec<u8>), GridError> {
    if cell == 0 {
        return Err(GridError::Invalid(
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
    GridError::check_budget(what, w * h, "pixels", "picture", MAX_PIXELS, hint)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_round_has_one_tile_per_cu() {
        let g = first_round(
            48,
            36,
            8,
            256,
            GridOrder::XcdSwizzle {
                xcds: 8,
                window: 5,
                chunk: 25,
            },
        )
        .expect("a 2-d order");
        let coloured: Vec<u64> = g.iter().flatten().flatten().copied().collect();
        assert_eq!(coloured.len(), 256);
        for x in 0..8 {
            assert_eq!(coloured.iter().filter(|&&c| c == x).count(), 32);
        }
    }

    #[test]
    fn orders_of_another_rank_draw_nothing() {
        let r = first_round(4, 4, 8, 16, GridOrder::HeadFirst { xcds: 8 });
        assert!(matches!(r, Err(GridError::Invalid(_))), "{r:?}");
    }
}
