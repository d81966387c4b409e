//! Aggregating functions and their state. (being written)
