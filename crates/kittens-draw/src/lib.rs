//! Pictures: the first dispatch round of a grid order ([`grid`]) and the PNG encoder that writes it
//! ([`png`]). A crate of its own so that the planners (kittens-grid) stay numbers only; it reads grid
//! orders from kittens-grid, and only the CLI reads it.

pub mod grid;
pub mod png;

pub use grid::{first_round, render_rgb, text_map};
pub use png::encode_png;
