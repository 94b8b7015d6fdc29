//! kittens-kernels (being written).
