//! The options of `-x name=value` and `#pragma D option`. (being written)
