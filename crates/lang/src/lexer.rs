//! Tokens of D. (being written)
