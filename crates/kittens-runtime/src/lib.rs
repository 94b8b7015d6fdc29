//! kittens-runtime (being written).
