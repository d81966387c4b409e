/* expect: substr( ) prototype mismatch: 4 args passed, at most 3 expected @ 2:15 */
BEGIN { trace(substr("a", 1, 2, 3)); }
