//! An emulator of AMD CDNA3/CDNA4 (gfx942/gfx950) code objects: it loads the ELF a compiler produced,
//! decodes its machine code and runs it on the host, wave by wave, with asynchronous memory.
//!
//! No AMD GPU is needed: this runs the *same bytes* a HIP runtime would load, so a wrong wait count,
//! a wrong inline-assembly constraint or a miscompile shows up as a wrong result (or a typed error),
//! which running the kernel source through a host header cannot reveal.

pub mod code_object;
pub mod decode;
mod elf;
pub mod exec;
pub mod kernarg;
mod msgpack;

pub use code_object::{KernArg, Kernel, KernelDescriptor};
pub use decode::{decode_all, decode_one, Enc, Fam, Instr, Op};

/// Everything that can go wrong loading or running a code object.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("not a usable code object: {0}")]
    BadElf(String),
    #[error("AMDGPU metadata: {0}")]
    BadMetadata(String),
    #[error("unsupported target: {0}")]
    UnsupportedTarget(String),
    #[error("{target}: unknown instruction at byte {offset:#x} of the kernel code ({what}; first dword {word:#010x})")]
    UnknownInstruction {
        target: &'static str,
        offset: usize,
        what: String,
        word: u32,
    },
    #[error("instruction at byte {offset:#x} runs past the end of the kernel code")]
    Truncated { offset: usize },
}
