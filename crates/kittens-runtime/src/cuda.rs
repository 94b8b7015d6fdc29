//! CUDA runtime and NVRTC (being written).
