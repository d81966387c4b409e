/* expect: strlen( ) prototype mismatch: 2 args passed, 1 expected @ 2:15 */
BEGIN { trace(strlen("a", "b")); }
