//! The GEMM benchmark (being written).
