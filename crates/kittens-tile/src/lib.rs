//! kittens-tile (being written).
