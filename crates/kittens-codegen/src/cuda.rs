//! CUDA lowering for Hopper (being written).
