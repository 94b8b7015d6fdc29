//! Pictures too large to draw are refused with the limit named, before anything is allocated.

use kittens_draw::{first_round, render_rgb};
use kittens_grid::remap::GridOrder;
use kittens_grid::GridError;

/// The error's message, checked to name `limit`.
fn limit_error<T: std::fmt::Debug>(r: Result<T, GridError>, limit: &str) -> String {
    let msg = r.expect_err("must be refused").to_string();
    assert!(msg.contains(limit), "`{msg}` does not name `{limit}`");
    msg
}

#[test]
fn the_map_refuses_a_grid_over_its_budget() {
    limit_error(
        first_round(1_000_000, 1_000_000, 8, 256, GridOrder::RowMajor),
        "2^22",
    );
}

/// `--cell 100000` on a 48 x 36 grid: 3600001 x 4800001 pixels. The old renderer computed the
/// size in u32 (wrapping) and then indexed out of range.
#[test]
fn the_png_refuses_an_image_over_its_pixel_budget() {
    let map = first_round(48, 36, 8, 256, GridOrder::RowMajor).unwrap();
    let msg = limit_error(render_rgb(&map, 100_000), "2^24");
    assert!(msg.contains("3600001x4800001"), "{msg}");
    limit_error(render_rgb(&map, u32::MAX), "2^24");
    // Inside the budget the picture has the size it says: 36·12+1 by 48·12+1, RGB.
    let (w, h, px) = render_rgb(&map, 12).unwrap();
    assert_eq!((w, h, px.len()), (433, 577, 433 * 577 * 3));
}

#[test]
fn the_png_refuses_cells_without_pixels() {
    let map = first_round(2, 2, 8, 256, GridOrder::RowMajor).unwrap();
    assert!(matches!(render_rgb(&map, 0), Err(GridError::Invalid(_))));
}
