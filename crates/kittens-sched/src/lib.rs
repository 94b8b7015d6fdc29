//! kittens-sched (being written).
