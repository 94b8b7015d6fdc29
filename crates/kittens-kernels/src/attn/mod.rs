//! What the attention kernels share (`crate::attn_fwd`, `crate::attn_bwd`, `crate::attn_varlen`,
//! `crate::rotary`) and what the references and the interpreter runs read: the logits' scale, cap
//! and window ([`score`]), and the strides of tensors given in their own strides ([`strides`]).
//! Kernels import each other's pieces only through here.

pub mod score;
pub mod strides;
