//! kittens-codegen (being written).
