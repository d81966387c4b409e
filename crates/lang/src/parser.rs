//! Recursive-descent parser for D. (being written)
