//! What the attention kernels share (`crate::attn_fwd`, `crate::attn_bwd`, `crate::attn_varlen`,
//! `crate::attn_paged`, `crate::rotary`) and what the references and the interpreter runs read: the
//! tensors' layout ([`layout`]) or caller strides ([`strides`]), the call's sizes and mask
//! ([`shape`]), the logits' scale, cap and window ([`score`]), the online softmax ([`softmax`]),
//! the key step of the varlen and paged forwards ([`key_step`]), the Hopper programs' tiles
//! ([`hopper`], [`hopper_bwd`]), the strip passes around the Hopper backwards' key blocks
//! ([`bwd_strips`]), a key split's partials, merge and launches ([`split`]) and the packed
//! (variable-length) programs' configuration, offsets and views ([`varlen`]). Kernels share code only
//! through here, and nothing here imports a kernel.

pub(crate) mod bwd_strips;
pub(crate) mod hopper;
pub(crate) mod hopper_bwd;
pub(crate) mod key_step;
pub mod layout;
pub mod score;
pub mod shape;
pub(crate) mod softmax;
pub(crate) mod split;
pub(crate) mod staged;
pub mod strides;
pub(crate) mod varlen;
pub mod varlen_problem;

pub use layout::AttnLayout;
pub use score::{AttnArgs, AttnOptions, Logits, Window};
pub use shape::{AttnShape, BwdShape, Causal};
pub(crate) use softmax::{HeadLogits, Softmax};
pub(crate) use staged::Staged;
pub use strides::AttnStrides;
