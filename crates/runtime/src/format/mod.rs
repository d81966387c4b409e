//! DTrace output formats. (being written)
