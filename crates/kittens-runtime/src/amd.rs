//! AMDGPU toolchain and code-object analysis (being written).
