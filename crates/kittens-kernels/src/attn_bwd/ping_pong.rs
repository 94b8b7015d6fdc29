//! The key blocks' loop as HipKittens' 8-wave ping-pong (§3.3.2). Placeholder.
use super::key_block::KeyBlock;
use kittens_ir::KernelBuilder;

pub(super) fn key_loop(k: &mut KernelBuilder, kb: &KeyBlock) {
    let _ = (k, kb);
}
