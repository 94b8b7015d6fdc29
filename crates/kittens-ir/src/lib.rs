//! kittens-ir (being written).
