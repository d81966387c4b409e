//! Rendering compile errors with source line and caret. (being written)
